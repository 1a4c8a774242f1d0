//! A real headless Chromium driven through WebDriver (fantoccini + chromedriver),
//! for the dashboard's tests. Each `Browser` runs its own `chromedriver` on a free
//! port in its own process group, so dropping it (a failed test too) ends the
//! driver and the Chromium it started.
//!
//! Chromium and its driver come from Debian (`chromium`, `chromium-driver`): when
//! missing, they are installed once per test binary if we are root with apt-get,
//! otherwise the test fails saying what to install. It never skips.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a page may take to show something: a bound for failures on a loaded
/// 2-core machine, not a timing assertion.
const WAIT: Duration = Duration::from_secs(40);

static INSTALL: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);

fn chromedriver_on_path() -> Option<PathBuf> {
    ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"].iter().map(PathBuf::from).find(|p| p.exists())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn apt_install() -> Result<(), String> {
    let run = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("apt-get: {e}"))
            .and_then(|s| if s.success() { Ok(()) } else { Err(format!("apt-get {args:?} failed: {s}")) })
    };
    run(&["update", "-qq"])?;
    run(&["install", "-y", "-qq", "chromium", "chromium-driver"])
}

/// The chromedriver binary, installing Chromium and its driver once if needed.
fn chromedriver() -> PathBuf {
    let mut guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let result = guard.get_or_insert_with(|| {
        if let (Some(driver), true) = (chromedriver_on_path(), Path::new(CHROMIUM).exists()) {
            return Ok(driver);
        }
        let apt = Path::new("/usr/bin/apt-get").exists();
        if !(is_root() && apt) {
            return Err("the dashboard tests need Chromium and chromedriver: install the Debian packages \
                 `chromium` and `chromium-driver` (apt-get install chromium chromium-driver)"
                .to_owned());
        }
        apt_install()?;
        chromedriver_on_path()
            .ok_or_else(|| "chromium-driver installed but chromedriver not found".to_owned())
    });
    match result {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// One chromedriver and one headless Chromium session.
pub struct Browser {
    pub client: Client,
    base: String,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver leads its own process group; Chromium and its helpers are in it.
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.driver.id())]).status();
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// Starts a browser for the control plane at `base` (`http://127.0.0.1:port`).
    pub async fn start(base: &str) -> Browser {
        let port = free_port();
        let mut driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                         "--window-size=1280,900", "--no-first-run", "--disable-extensions"],
            }),
        );
        caps.insert("goog:loggingPrefs".to_owned(), json!({ "browser": "ALL" }));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut last = None;
        // chromedriver needs a moment to listen; retry the session for a bounded time.
        for _ in 0..100 {
            match ClientBuilder::new(connector.clone()).capabilities(caps.clone()).connect(&url).await {
                Ok(client) => return Browser { client, base: base.to_owned(), driver },
                Err(e) => last = Some(e.to_string()),
            }
            if let Ok(Some(status)) = driver.try_wait() {
                panic!("chromedriver exited: {status}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = driver.kill();
        panic!("no WebDriver session: {last:?}");
    }

    pub async fn goto(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.base)).await.expect("goto");
    }

    /// Waits for an element (by XPath); fails after a generous bound.
    pub async fn wait_xpath(&self, xpath: &str) -> Element {
        match self.client.wait().at_most(WAIT).for_element(Locator::XPath(xpath)).await {
            Ok(el) => el,
            Err(e) => {
                let url = self.client.current_url().await.map(|u| u.to_string()).unwrap_or_default();
                let text = self.body_text().await;
                let log = self.client.issue_cmd(ChromeLog).await.unwrap_or_default();
                panic!("no element {xpath}: {e}\nat {url}; the page says:\n{text}\nconsole: {log}")
            }
        }
    }

    /// The input, select or textarea a `<label>` with this text points at.
    pub async fn field(&self, label: &str) -> Element {
        self.wait_xpath(&format!("//*[@id=//label[normalize-space()={}]/@for]", lit(label))).await
    }

    /// Types into the field labelled `label` (clearing it first).
    pub async fn fill(&self, label: &str, value: &str) {
        let f = self.field(label).await;
        f.clear().await.expect("clear");
        f.send_keys(value).await.expect("type");
    }

    /// Picks an option of the select labelled `label` by its value.
    pub async fn choose(&self, label: &str, value: &str) {
        self.field(label).await.select_by_value(value).await.expect("select");
    }

    /// A `<button>` by its text, within `scope` (an XPath prefix, `""` for the page).
    pub async fn button(&self, scope: &str, text: &str) -> Element {
        self.wait_xpath(&format!("{scope}//button[normalize-space()={}]", lit(text))).await
    }

    pub async fn click_button(&self, text: &str) {
        self.button("", text).await.click().await.expect("click");
    }

    /// Follows a navigation link by its text.
    pub async fn click_link(&self, text: &str) {
        let xpath = format!("//a[normalize-space()={}]", lit(text));
        self.wait_xpath(&xpath).await.click().await.expect("click link");
    }

    /// Waits until some element's own text is exactly `text`.
    pub async fn wait_text(&self, text: &str) -> Element {
        self.wait_xpath(&format!("//*[normalize-space(text())={}]", lit(text))).await
    }

    /// The page's visible text.
    pub async fn body_text(&self) -> String {
        self.client.find(Locator::Css("body")).await.expect("body").text().await.expect("text")
    }

    pub async fn title(&self) -> String {
        self.client.title().await.expect("title")
    }

    /// Signs in through the sign-in page (whatever page the visit started on) and
    /// waits for the navigation.
    pub async fn sign_in(&self, email: &str, password: &str) {
        self.fill("Email", email).await;
        self.fill("Password", password).await;
        self.click_button("Sign in").await;
        self.wait_xpath("//nav//a[normalize-space()='Overview']").await;
    }

    /// Marks the document, so a test can tell the page was not reloaded.
    pub async fn mark_document(&self) {
        self.client.execute("window.__spendgateMark = 42;", vec![]).await.expect("mark");
    }

    pub async fn document_is_marked(&self) -> bool {
        self.client
            .execute("return window.__spendgateMark === 42;", vec![])
            .await
            .expect("read mark")
            .as_bool()
            .unwrap_or(false)
    }

    /// The browser console's errors so far: severe entries other than the network
    /// log's lines for 4xx answers, which the pages expect and show (the session
    /// check's 401 before sign-in, a Free tier's 403).
    pub async fn console_errors(&self) -> Vec<String> {
        let res = self.client.issue_cmd(ChromeLog).await.unwrap_or_else(|e| panic!("read browser log: {e}"));
        res.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .filter(|e| {
                        !(e["source"] == "network" && is_4xx_line(e["message"].as_str().unwrap_or("")))
                    })
                    .filter_map(|e| e["message"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// With `SPENDGATE_SCREENSHOTS=<dir>`, saves the page as `<name>-laptop.png`
    /// (1366×800) and `<name>-phone.png` (390×844, a phone's viewport) there; the
    /// browser's own size is restored afterwards.
    pub async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("SPENDGATE_SCREENSHOTS") else { return };
        let _ = std::fs::create_dir_all(&dir);
        for (width, suffix) in [(Width::Laptop, "laptop"), (Width::Phone, "phone")] {
            self.set_width(width).await;
            let png = self.client.screenshot().await.expect("screenshot");
            std::fs::write(Path::new(&dir).join(format!("{name}-{suffix}.png")), png)
                .expect("write screenshot");
        }
        self.set_width(Width::Default).await;
    }

    /// Lays the page out at `width` (Chromium's device emulation, so the viewport is
    /// exactly that size whatever the window) and waits two frames for the layout.
    pub async fn set_width(&self, width: Width) {
        let (cmd, params) = match width {
            Width::Default => ("Emulation.clearDeviceMetricsOverride", json!({})),
            Width::Laptop => (
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": 1366, "height": 800, "deviceScaleFactor": 1, "mobile": false }),
            ),
            Width::Phone => (
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true }),
            ),
        };
        self.client.issue_cmd(Cdp { cmd, params }).await.unwrap_or_else(|e| panic!("{cmd}: {e}"));
        self.client
            .execute_async("requestAnimationFrame(() => requestAnimationFrame(arguments[0]));", vec![])
            .await
            .expect("wait for layout");
    }

    /// Runs `script` (a function body that returns JSON) in the page.
    pub async fn eval(&self, script: &str) -> serde_json::Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// What stops a person using the page on screen, by the checks of
    /// `accessibility.js`: the page scrolling sideways, a form control without a
    /// label, a button without a name, text below the WCAG AA contrast ratio.
    pub async fn accessibility_problems(&self) -> Vec<String> {
        let found = self.eval(include_str!("accessibility.js")).await;
        serde_json::from_value(found).expect("a list of problems")
    }

    /// The element's role and accessible name as the browser computes them for
    /// assistive technology (WebDriver's computed role and label).
    pub async fn accessible(&self, el: &Element) -> (String, String) {
        let mut out = Vec::new();
        for what in ["computedrole", "computedlabel"] {
            let element = el.element_id().to_string();
            let v = self
                .client
                .issue_cmd(Computed { element, what })
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            out.push(v.as_str().unwrap_or_default().to_owned());
        }
        let label = out.pop().unwrap_or_default();
        (out.pop().unwrap_or_default(), label)
    }

    /// Presses Tab `n` times and answers the focused element's tag, text and whether
    /// its focus is drawn (an outline of non-zero width).
    pub async fn tab(&self, n: usize) -> (String, String, bool) {
        let body = self.client.find(Locator::Css("body")).await.expect("body");
        for _ in 0..n {
            body.send_keys("\u{E004}").await.expect("press Tab");
        }
        let v = self
            .eval(
                "const e = document.activeElement; const s = getComputedStyle(e); \
                 return [e.tagName.toLowerCase(), (e.innerText || e.getAttribute('aria-label') || '').trim(), \
                 s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0];",
            )
            .await;
        (
            v[0].as_str().unwrap_or_default().to_owned(),
            v[1].as_str().unwrap_or_default().to_owned(),
            v[2] == true,
        )
    }
}

/// The viewport sizes pages are checked and pictured at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// The browser's own window (1280×900).
    Default,
    /// 1366×800.
    Laptop,
    /// 390×844, a phone.
    Phone,
}

/// A Chrome DevTools command through chromedriver (`goog/cdp/execute`).
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: serde_json::Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/goog/cdp/execute", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (reqwest::Method, Option<String>) {
        (reqwest::Method::POST, Some(json!({ "cmd": self.cmd, "params": self.params }).to_string()))
    }
}

/// WebDriver's computed role (`computedrole`) or accessible name (`computedlabel`) of
/// an element.
#[derive(Debug)]
struct Computed {
    element: String,
    what: &'static str,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Computed {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/element/{}/{}",
            session_id.unwrap_or_default(),
            self.element,
            self.what
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (reqwest::Method, Option<String>) {
        (reqwest::Method::GET, None)
    }
}

/// Chromium's log endpoint (`goog/log`), for console errors.
#[derive(Debug)]
struct ChromeLog;

impl fantoccini::wd::WebDriverCompatibleCommand for ChromeLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (reqwest::Method, Option<String>) {
        (reqwest::Method::POST, Some(json!({ "type": "browser" }).to_string()))
    }
}

/// Chromium's network line for a 4xx answer: "<url> - Failed to load resource: the
/// server responded with a status of 401 (Unauthorized)".
fn is_4xx_line(message: &str) -> bool {
    message.split("with a status of ").nth(1).is_some_and(|rest| rest.starts_with('4'))
}

/// An XPath string literal for `s` (concat() when it holds both quote kinds).
pub fn lit(s: &str) -> String {
    if !s.contains('\'') {
        format!("'{s}'")
    } else if !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("concat('{}')", s.split('\'').collect::<Vec<_>>().join("', \"'\", '"))
    }
}

/// Dollars with two decimals as the dashboard shows them (half away from zero to
/// the cent, thousands separated).
pub fn usd(micros: i64) -> String {
    let negative = micros < 0;
    let cents = (micros.unsigned_abs() + 5_000) / 10_000;
    let dollars = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, c) in dollars.chars().enumerate() {
        if i > 0 && (dollars.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{}${grouped}.{:02}", if negative && cents > 0 { "-" } else { "" }, cents % 100)
}
