// aws-lc-sys tells the crates that depend on it where it built AWS-LC
// (DEP_AWS_LC_<version>_*). This makes those places known at one stable
// path, SLUICE_AWSLC_DIR: include/ and lib/libssl.a, lib/libcrypto.a, and
// version.txt. The Makefile compiles and links sluice against them.
use std::env;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

fn dep(key: &str) -> String {
    for (k, v) in env::vars() {
        if k.starts_with("DEP_AWS_LC_") && k.ends_with(key) {
            return v;
        }
    }
    panic!("aws-lc-sys did not report {}", key);
}

fn relink(target: &Path, link: &Path) {
    let _ = fs::remove_file(link);
    symlink(target, link).unwrap_or_else(|e| panic!("{}: {}", link.display(), e));
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLUICE_AWSLC_DIR");
    let out = PathBuf::from(env::var("SLUICE_AWSLC_DIR").expect("SLUICE_AWSLC_DIR not set"));
    let lib = out.join("lib");
    fs::create_dir_all(&lib).unwrap();
    relink(Path::new(&dep("_INCLUDE")), &out.join("include"));
    relink(Path::new(&dep("_LIBSSL_PATH")), &lib.join("libssl.a"));
    relink(Path::new(&dep("_LIBCRYPTO_PATH")), &lib.join("libcrypto.a"));
}
