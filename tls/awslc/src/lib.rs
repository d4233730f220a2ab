// Empty: the crate exists for its build script (see Cargo.toml).
