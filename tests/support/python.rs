//! The official Python SDKs, for driving the proxy as real agents do: a virtualenv
//! under the build's target directory with the versions pinned in
//! `tests/python/requirements.txt`, made (with pip) the first time it is needed and
//! again whenever that file changes, then `tests/python/*.py` scripts run in it.
//!
//! Nothing here skips: without a Python 3 with `venv` and pip, or without access to
//! the package index on first use, the tests that need it fail with the reason.
//! `SPENDGATE_TEST_PYTHON` names another interpreter than `python3`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The pinned requirements, also the virtualenv's freshness stamp.
const REQUIREMENTS: &str = include_str!("../python/requirements.txt");

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python")
}

/// The virtualenv's interpreter, the environment made first if needed (once per
/// process; concurrent test binaries are not expected).
fn interpreter() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
        let python = dir.join("bin/python");
        let stamp = dir.join("requirements.stamp");
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s == REQUIREMENTS) && python.exists() {
            return python;
        }
        let base = std::env::var("SPENDGATE_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        run_checked(
            Command::new(&base).args(["-m", "venv", "--clear"]).arg(&dir),
            "create the test virtualenv",
        );
        let requirements = scripts().join("requirements.txt");
        run_checked(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(&requirements),
            "install tests/python/requirements.txt with pip",
        );
        std::fs::write(&stamp, REQUIREMENTS).expect("write the virtualenv stamp");
        python
    })
}

fn run_checked(command: &mut Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("cannot {what}: {e} (is Python 3 installed?)"));
    assert!(
        out.status.success(),
        "cannot {what}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `tests/python/<script> <case>` against the proxy at `proxy_url` with the
/// spendgate key `key`, and returns the JSON object it printed (panics, with its
/// output, when it failed).
pub async fn run(script: &str, case: &str, proxy_url: &str, key: &str) -> serde_json::Value {
    let (script, arg, url, key) =
        (scripts().join(script), case.to_owned(), proxy_url.to_owned(), key.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(interpreter())
            .arg(&script)
            .arg(&arg)
            .env("SPENDGATE_PROXY_URL", url)
            .env("SPENDGATE_KEY", key)
            // Never the machine's own: the SDKs talk to the local proxy only.
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
            .output()
    })
    .await
    .expect("join the Python run")
    .expect("start the Python interpreter");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{case} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{case}: not JSON ({e}): {stdout}"))
}

/// Starts `tests/python/<script> <args…>` in the virtualenv, its stdout piped (a
/// long-running helper such as a local server); the caller kills it.
pub fn spawn(script: &str, args: &[&str]) -> std::process::Child {
    Command::new(interpreter())
        .arg(scripts().join(script))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("start the Python interpreter")
}
