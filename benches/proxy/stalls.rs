//! Stalls at concurrency 1: each target driven back to back by one client for a few
//! seconds (as `wrk -c1` does), reporting p50, p99, p99.9 and the maximum, and every
//! call that took longer than [`STALL`] with when it happened in the run. A stall that
//! comes back shows here at once, and its period (every N seconds) points at the timer
//! behind it.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::{histogram, label, micros, once, pct, BoxError, Target};

/// A call slower than this is a stall (the floor's p99.9 is well below 1 ms).
pub const STALL: Duration = Duration::from_millis(10);
/// Stalls listed one by one per target; the rest are only counted.
const LISTED: usize = 20;

pub struct Run {
    name: &'static str,
    calls: u64,
    hist: Histogram<u64>,
    /// (ms since the run began, the call's µs, the proxy's own timing headers).
    stalls: Vec<(u64, u64, String)>,
}

/// Drives each target alone at concurrency 1 for `seconds`.
pub async fn measure(
    http: &reqwest::Client,
    targets: &[&Target],
    seconds: u64,
) -> Result<Vec<Run>, BoxError> {
    let mut runs = Vec::with_capacity(targets.len());
    for t in targets {
        let mut run = Run { name: t.name, calls: 0, hist: histogram(), stalls: Vec::new() };
        let started = Instant::now();
        // The wall clock, to line stalls up with the server's log.
        println!("   stalls phase: {} from {}", t.name, chrono::Utc::now().to_rfc3339());
        let until = started + Duration::from_secs(seconds);
        while Instant::now() < until {
            let s = once(http, t, false).await?;
            run.calls += 1;
            run.hist.saturating_record(micros(s.total));
            if s.total >= STALL {
                let at = micros(started.elapsed()) / 1000;
                let mut timing: Vec<String> = s.timing.iter().map(|(n, ms)| format!("{n} {ms:.1}")).collect();
                if let Some(ms) = s.overhead_ms {
                    timing.push(format!("overhead {ms:.1}"));
                }
                run.stalls.push((at, micros(s.total), timing.join(" ")));
            }
        }
        runs.push(run);
    }
    Ok(runs)
}

pub fn print(runs: &[Run], seconds: u64) {
    println!(
        "stalls, concurrency 1, {seconds} s per target (µs)      p50      p99    p99.9      max  calls  calls ≥ {} ms",
        STALL.as_millis()
    );
    for r in runs {
        println!(
            "{}  {:<32}            {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}",
            r.name,
            label(r.name),
            pct(&r.hist, 0.5),
            pct(&r.hist, 0.99),
            pct(&r.hist, 0.999),
            r.hist.max(),
            r.calls,
            r.stalls.len()
        );
        if !r.stalls.is_empty() {
            let listed: Vec<String> =
                r.stalls.iter().take(LISTED).map(|(at, us, timing)| stall_line(*at, *us, timing)).collect();
            println!("     {}", listed.join("\n     "));
        }
    }
}

fn stall_line(at: u64, us: u64, timing: &str) -> String {
    let ms = us as f64 / 1000.0;
    if timing.is_empty() {
        format!("{ms:.1} ms at {at} ms")
    } else {
        format!("{ms:.1} ms at {at} ms (server, ms: {timing})")
    }
}

pub fn summary(runs: &[Run]) -> Value {
    runs.iter()
        .map(|r| {
            (
                r.name.to_ascii_lowercase(),
                json!({ "calls": r.calls, "p50": pct(&r.hist, 0.5), "p99": pct(&r.hist, 0.99),
                        "p999": pct(&r.hist, 0.999), "max": r.hist.max(), "stalls": r.stalls.len() }),
            )
        })
        .collect::<serde_json::Map<String, Value>>()
        .into()
}

impl Run {
    pub fn is_proxy(&self) -> bool {
        through_spendgate(self.name)
    }

    pub fn calls(&self) -> u64 {
        self.calls
    }
}

/// What `wrk -t1 -c1` measured on one target, µs.
pub struct Wrk {
    name: &'static str,
    line: String,
    requests: u64,
}

impl Wrk {
    /// Requests wrk sent through the proxy (they are recorded like any other).
    pub fn proxied(&self) -> u64 {
        if through_spendgate(self.name) {
            self.requests
        } else {
            0
        }
    }
}

/// Drives each target with `wrk -t1 -c1` (one connection, back to back: a faster
/// client than this process's, as the issue's measurements used) when `wrk` is
/// installed; its Lua `done` hook prints p50, p99, p99.9, the maximum and the count.
/// Each request has its own body, as the loop detection of the bench's budgets wants.
pub fn wrk(targets: &[&Target], seconds: u64) -> Result<Vec<Wrk>, BoxError> {
    if seconds == 0 {
        return Ok(Vec::new());
    }
    let Some(binary) = which("wrk") else {
        println!("wrk: not measured (install it: apt-get install -y wrk)");
        return Ok(Vec::new());
    };
    let dir = tempfile::tempdir()?;
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let script = dir.path().join(format!("{}.lua", t.name));
        std::fs::write(&script, lua(t))?;
        let output = std::process::Command::new(&binary)
            .args(["-t1", "-c1", &format!("-d{seconds}s"), "-s"])
            .arg(&script)
            .arg(&t.url)
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("WRK "))
            .ok_or_else(|| format!("wrk printed no figures for {}: {text}", t.name))?;
        let requests = line.split("requests ").nth(1).and_then(|r| r.split_whitespace().next()?.parse().ok());
        out.push(Wrk { name: t.name, line: line.to_owned(), requests: requests.unwrap_or(0) });
    }
    Ok(out)
}

pub fn print_wrk(runs: &[Wrk], seconds: u64) {
    if runs.is_empty() {
        return;
    }
    println!("wrk -t1 -c1, {seconds} s per target (µs)");
    for r in runs {
        println!("{}  {:<32} {}", r.name, label(r.name), r.line);
    }
}

fn lua(t: &Target) -> String {
    let mut headers = String::new();
    for (name, value) in &t.headers {
        let value = value.to_str().unwrap_or_default();
        headers.push_str(&format!("wrk.headers[ [[{name}]] ] = [[{value}]]\n"));
    }
    let path = t.url.find("/v1/").map_or("/", |i| &t.url[i..]);
    format!(
        r#"wrk.method = "POST"
{headers}local n = 0
request = function()
  n = n + 1
  local body = string.format('{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"wrk %010d"}}],"max_tokens":50}}', n)
  return wrk.format(nil, "{path}", nil, body)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK p50 %d  p99 %d  p99.9 %d  max %d  requests %d  errors %d\n",
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max,
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout))
end
"#
    )
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// Whether a target's calls go through spendgate (and so leave a cost event): the chat
/// route (B) and the Responses route (R).
fn through_spendgate(name: &str) -> bool {
    matches!(name, "B" | "R")
}
