//! Rebuilds the binary when a migration is added or changed: `embed_migrations!`
//! reads the `migrations/` folder at compile time.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
