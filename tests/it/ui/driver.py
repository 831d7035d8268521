"""A headless Chromium driven through WebDriver (Selenium, chromedriver), for the
console's test (tests/it/ui/mod.rs).

It reads one JSON command a line on stdin and answers each with one JSON line on
stdout: {"ok": true, ...} or {"ok": false, "error": "..."}. Every wait is bounded
(WAIT seconds). At the end of stdin (the test is done, or panicked) it quits the
browser and exits, so no chromium or chromedriver outlives the test.

The browser reaches nothing but loopback: every name resolves to nothing but
127.0.0.1 (--host-resolver-rules), anything else goes to a closed loopback port
as its proxy, and its background services (updates, sync, metrics) are off.
"""

import json
import shutil
import subprocess
import sys
import tempfile
import traceback

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 10

CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--no-pings",
    "--dns-prefetch-disable",
    "--disable-features=OptimizationHints,MediaRouter,Translate,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    "--window-size=1280,800",
]


def start(chromium, chromedriver, profile):
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument("--user-data-dir=" + profile)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The path given: Selenium Manager (which could download a driver) never runs.
    service = Service(executable_path=chromedriver, log_output=subprocess.DEVNULL)
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


def wait(driver, condition, what):
    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(condition, message=what)


def visible(driver, element_id):
    return wait(driver, EC.visibility_of_element_located((By.ID, element_id)), element_id)


def texts(item):
    """An item of a list: its whole text, each badge and each field by its label."""
    fields = {}
    for f in item.find_elements(By.CSS_SELECTOR, ".field"):
        label = f.find_element(By.CSS_SELECTOR, ".label").text
        fields[label] = f.find_element(By.CSS_SELECTOR, ".value").text
    return {
        "text": item.text,
        "target": item.find_element(By.CSS_SELECTOR, ".target").text,
        "badges": [b.text for b in item.find_elements(By.CSS_SELECTOR, ".badge")],
        "fields": fields,
        "buttons": [b.get_attribute("data-decision")
                    for b in item.find_elements(By.CSS_SELECTOR, "button")],
        "requests": [{"method": r.find_element(By.CSS_SELECTOR, ".held-method").text,
                      "path": r.find_element(By.CSS_SELECTOR, ".url").text}
                     for r in item.find_elements(By.CSS_SELECTOR, ".held-request")],
    }


def held(driver, cmd):
    """An approval once its list shows `count` held requests: what it shows."""
    selector = f'li.approval[data-host="{cmd["host"]}"] .held-request'
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, selector)) == cmd["count"],
         f'{cmd["count"]} held requests of {cmd["host"]}')
    return texts(item(driver, "approval", "host", cmd["host"]))


def item(driver, kind, attr, value):
    selector = f'li.{kind}[data-{attr}="{value}"]'
    return wait(driver, EC.visibility_of_element_located((By.CSS_SELECTOR, selector)), selector)


def login(driver, cmd):
    field = visible(driver, "token")
    field.clear()
    field.send_keys(cmd["token"])
    driver.find_element(By.ID, "connect").click()

    def settled(d):
        for element_id in ("console", "login-error"):
            e = d.find_element(By.ID, element_id)
            if e.is_displayed():
                return element_id
        return False

    shown = wait(driver, settled, "the console or the login error")
    return {
        "signed_in": shown == "console",
        "message": driver.find_element(By.ID, "login-error").text,
        "token_field": driver.find_element(By.ID, "token").get_attribute("value"),
    }


def decide(driver, cmd):
    row = item(driver, "approval", "host", cmd["host"])
    row.find_element(By.CSS_SELECTOR, f'button[data-decision="{cmd["decision"]}"]').click()
    wait(driver, EC.staleness_of(row), "the approval leaves the list")
    # The poll may take the row away before the decision's answer is shown: wait for the
    # note that names this destination, not for the note of an earlier one.
    note = driver.find_element(By.ID, "approvals-done")
    wait(driver, lambda d: note.is_displayed() and cmd["host"] in note.text, "the decision's note")
    return {"done": note.text}


def screenshot(driver, cmd):
    width, height = cmd["width"], cmd["height"]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600,
    })
    # Let the layout settle at the new width before measuring and shooting it.
    driver.execute_script("return new Promise(r => requestAnimationFrame(() => r()))")
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    saved = driver.save_screenshot(cmd["path"])
    return {"saved": saved, "overflow_px": overflow}


def run(driver, cmd):
    do = cmd["do"]
    if do == "open":
        driver.get(cmd["url"])
        visible(driver, "token")
        return {"title": driver.title}
    if do == "login":
        return login(driver, cmd)
    if do == "denial":
        return texts(item(driver, "denial", "host", cmd["host"]))
    if do == "session":
        return texts(item(driver, "session", "id", cmd["id"]))
    if do == "approval":
        return texts(item(driver, "approval", "host", cmd["host"]))
    if do == "held":
        return held(driver, cmd)
    if do == "decide":
        return decide(driver, cmd)
    if do == "js":
        return {"value": driver.execute_script(cmd["code"])}
    if do == "screenshot":
        return screenshot(driver, cmd)
    if do == "logs":
        return {"entries": driver.get_log("browser")}
    raise ValueError(f"unknown command {do!r}")


def main():
    chromium, chromedriver = sys.argv[1], sys.argv[2]
    profile = tempfile.mkdtemp(prefix="egress-ui-chromium-")
    driver = None
    try:
        driver = start(chromium, chromedriver, profile)
        print(json.dumps({"ok": True, "started": driver.capabilities.get("browserVersion")}),
              flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["do"] == "quit":
                break
            try:
                answer = {"ok": True, **run(driver, cmd)}
            except Exception as e:  # the test reads it and fails with it
                answer = {"ok": False, "error": f"{type(e).__name__}: {e}",
                          "trace": traceback.format_exc()}
            print(json.dumps(answer), flush=True)
    except Exception as e:
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
