//! The `spendgate` binary: parses the command line and hands over to the library.

use std::process::ExitCode;

use clap::Parser;
use spendgate::cli::{Cli, Command};

/// mimalloc instead of glibc's allocator: the request and commit paths allocate many
/// small, short-lived strings; glibc spent 10-12 % of the server's CPU in
/// malloc/free under ingest load (perf), mimalloc about a third of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SPENDGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let config = match spendgate::config::Config::load(&cli.overrides()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spendgate: {e}");
            return ExitCode::from(2);
        }
    };
    let result = actix_web::rt::System::new().block_on(async move {
        match cli.command {
            Command::Serve { only, .. } => spendgate::serve(config, only).await.map_err(|e| e.to_string()),
            Command::Migrate => spendgate::cli::migrate(&config).await,
            Command::User { action } => spendgate::cli::user(&config, action).await,
            Command::Org { action } => spendgate::cli::org(&config, action).await,
            Command::Pricing { action } => spendgate::cli::pricing(&config, action).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spendgate: {e}");
            ExitCode::FAILURE
        }
    }
}
