//! Rebuilds the engine when a migration is added or changed: `embed_migrations!`
//! reads the workspace's `migrations/` folder at compile time.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
