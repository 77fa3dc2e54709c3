"""The pieces of the browser tests: a `replog console` process, headless Chromium driven by
Selenium, and reading the browser's console log.

Chromium and its driver are Debian's (`chromium`, `chromium-driver`: scripts/ensure-chromium.sh
installs them, `make test` runs it); Selenium is given both paths, so it never looks for
or downloads a browser of its own. Only processes started here are signalled, by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from replog.devcluster import DevCluster

CHROMIUM = os.environ.get("REPLOG_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("REPLOG_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
READY_TIMEOUT_S = 60.0
WINDOW = (1300, 900)


@dataclass
class ConsoleProcess:
    """`python -m replog console` for `cluster` (its TLS files), on 127.0.0.1 port 0."""

    cluster: DevCluster
    workdir: Path
    refresh_ms: int = 500
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    extra_args: list[str] = field(default_factory=list)

    @property
    def log_file(self) -> Path:
        return self.workdir / "console.log"

    def start(self) -> ConsoleProcess:
        ready = self.workdir / "console.ready"
        ready.unlink(missing_ok=True)
        tls = self.cluster.client_tls
        tls_args = []
        if tls is not None:
            tls_args = ["--tls-ca", str(tls.ca_file)]
            if tls.cert_file is not None and tls.key_file is not None:
                tls_args += ["--tls-cert", str(tls.cert_file), "--tls-key", str(tls.key_file)]
        cmd = [
            sys.executable, "-m", "replog", "console",
            "--address", self.cluster.bootstrap,
            *tls_args,
            "--listen", "127.0.0.1:0",
            "--ready-file", str(ready),
            "--refresh-ms", str(self.refresh_ms),
            "--log-level", "warning",
            *self.extra_args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the console did not start:\n{self.log_text()}")
            time.sleep(0.02)
        self.url = ready.read_text().splitlines()[0].rstrip("/")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def chrome() -> WebDriver:
    """Headless Chromium that keeps the page's console log (`console_errors`)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and shutil.which(path) is None:
            raise RuntimeError(f"{path} is missing: run `bash scripts/ensure-chromium.sh`")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


def console_errors(driver: WebDriver) -> list[str]:
    """The browser console's errors since the last call (the log is drained by reading)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def text(browser: WebDriver, element_id: str) -> str:
    """The element's text ("" when absent, or replaced by a refresh while read: callers
    wait on conditions, so they read again)."""
    try:
        found = browser.find_elements(By.ID, element_id)
        return found[0].text if found else ""
    except StaleElementReferenceException:
        return ""
