//! The C ABI of ModSecurity's @detectSQLi and @detectXSS for sluice's CRS
//! engine (src/libinjection.h declares it).

use std::os::raw::c_int;

/// libinjection's SQL-injection check on DATA[..LEN]. On a detection,
/// FINGERPRINT (at least 8 bytes) receives the token fingerprint, NUL-ended,
/// as ModSecurity's capture puts it in TX:0. Returns 1 or 0.
///
/// # Safety
/// DATA must point to LEN readable bytes (or LEN be 0), FINGERPRINT to 8
/// writable bytes or be null.
#[no_mangle]
pub unsafe extern "C" fn sluice_detect_sqli(data: *const u8, len: usize, fingerprint: *mut u8) -> c_int {
    let input: &[u8] = if len == 0 { &[] } else { std::slice::from_raw_parts(data, len) };
    // detect_sqli() tokenizes the input once more after its verdict to report a
    // fingerprint; nearly every value is clean and needs none, so the verdict
    // comes from the state alone and only a detection pays for detect_sqli().
    let mut state = libinjectionrs::SqliState::new(input, libinjectionrs::SqliFlags::FLAG_NONE);
    if !state.detect() {
        return 0;
    }
    if !fingerprint.is_null() {
        let r = libinjectionrs::detect_sqli(input);
        let fp = r.fingerprint.as_deref().map(|f| f.as_bytes()).unwrap_or(b"");
        let n = fp.len().min(7);
        std::ptr::copy_nonoverlapping(fp.as_ptr(), fingerprint, n);
        *fingerprint.add(n) = 0;
    }
    1
}

/// libinjection's XSS check on DATA[..LEN]. Returns 1 or 0.
///
/// # Safety
/// DATA must point to LEN readable bytes (or LEN be 0).
#[no_mangle]
pub unsafe extern "C" fn sluice_detect_xss(data: *const u8, len: usize) -> c_int {
    let input: &[u8] = if len == 0 { &[] } else { std::slice::from_raw_parts(data, len) };
    libinjectionrs::detect_xss(input).is_injection() as c_int
}
