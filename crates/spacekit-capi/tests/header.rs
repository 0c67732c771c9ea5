//! The checked-in `include/spacekit.h` is what cbindgen generates from the
//! sources now. Regenerate it after an API change with
//! `SPACEKIT_BLESS=1 cargo test -p spacekit-capi --test header`.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("UTF-8 header");
    let path = dir.join("include/spacekit.h");
    if std::env::var_os("SPACEKIT_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/spacekit.h");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != fresh {
        let line = current
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(fresh.lines().count()));
        panic!(
            "include/spacekit.h is out of date (first difference at line {}).\n\
             Regenerate it with: SPACEKIT_BLESS=1 cargo test -p spacekit-capi --test header",
            line + 1
        );
    }
}
