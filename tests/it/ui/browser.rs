//! A headless Chromium for the console's test: `driver.py` (Selenium over
//! chromedriver) run by `python3`, one JSON command a line. Tests skip, saying why,
//! when `chromium`, `chromedriver` or Python's `selenium` is missing (`.ci/run`
//! installs them).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one command may take: the driver bounds each of its waits at 10 s.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the browser may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/ui/driver.py");

/// The first of `names` found on `PATH`.
fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// The browser and its driver, or why the test cannot run here.
pub(super) fn tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = on_path(&["chromium", "chromium-browser"])
        .ok_or("chromium is not installed (apt-get install chromium)")?;
    let driver = on_path(&["chromedriver"])
        .ok_or("chromedriver is not installed (apt-get install chromium-driver)")?;
    let selenium = Command::new("python3")
        .args(["-c", "import selenium.webdriver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !selenium {
        return Err("python3 cannot import selenium (pip install selenium)".into());
    }
    Ok((chromium, driver))
}

/// Return from the test, saying why, when the browser cannot run.
macro_rules! require_browser {
    () => {
        match crate::ui::browser::tools() {
            Ok(tools) => tools,
            Err(reason) => {
                eprintln!("skipped: {reason}");
                return;
            }
        }
    };
}
pub(crate) use require_browser;

/// The running driver. Dropping it closes its stdin, on which it quits the browser;
/// it is killed (by its PID) only if it has not exited within 15 s.
pub(super) struct Browser {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: mpsc::Receiver<String>,
}

impl Browser {
    pub(super) fn start((chromium, driver): &(PathBuf, PathBuf)) -> Browser {
        let mut child = Command::new("python3")
            .arg(DRIVER)
            .arg(chromium)
            .arg(driver)
            // Selenium Manager is never needed (the paths are given); were it ever run, it
            // must neither download nor report.
            .env("SE_OFFLINE", "true")
            .env("SE_AVOID_STATS", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the browser driver");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut browser = Browser {
            child,
            stdin,
            answers,
        };
        let started = browser.answer(START_TIMEOUT);
        assert_eq!(started["ok"], true, "the browser did not start: {started}");
        browser
    }

    fn answer(&mut self, limit: Duration) -> Value {
        let line = self
            .answers
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no answer from the browser driver within {limit:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver said {line:?}: {e}"))
    }

    /// Run one command (see driver.py); panics, with the driver's error, unless it
    /// succeeds. Blocking: the proxy and the origins run in their own tasks meanwhile.
    pub(super) fn call(&mut self, command: Value) -> Value {
        let stdin = self.stdin.as_mut().expect("the driver's stdin");
        writeln!(stdin, "{command}").expect("write to the driver");
        stdin.flush().unwrap();
        let answer = self.answer(COMMAND_TIMEOUT);
        assert_eq!(
            answer["ok"], true,
            "{command}: {}\n{}",
            answer["error"], answer["trace"]
        );
        answer
    }

    /// What the browser logged since the last call of this (its console, and the
    /// network errors it reports there), as `(level, message)`.
    pub(super) fn logs(&mut self) -> Vec<(String, String)> {
        let answer = self.call(json!({"do": "logs"}));
        let entries = answer["entries"].as_array().cloned().unwrap_or_default();
        entries
            .iter()
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (text("level"), text("message"))
            })
            .collect()
    }

    /// A script's value in the page (`return ...;`).
    pub(super) fn js(&mut self, code: &str) -> Value {
        self.call(json!({"do": "js", "code": code}))["value"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
