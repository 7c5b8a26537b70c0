"""Open WebUI's first chat against the server, as a new user has it: Open WebUI installed as
it ships (in a venv of its own), pointed at `python -m runner serve` as at Ollama, a chat
with the catalog model typed into the page in headless Chromium, a screenshot saved, and
the server's log checked (every request Open WebUI sent answered 2xx). Too heavy for the
test suite (Open WebUI pulls in a gigabyte of packages), so run by hand:

    python -m venv OWUI && OWUI/bin/pip install open-webui playwright
    (cd CHROME && npm install @sparticuz/chromium)      # a Chromium from the npm registry
    python bench/open_webui.py --venv OWUI --chromium-package CHROME --out first-chat.png

(`--chromium PATH` takes a Chromium already installed instead.) The model is the pulled
smollm2:135m; Open WebUI adds its built-in tools to every chat, which the catalog's model
must accept (it does since it offers tools, as in Ollama's library).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.serve_start import free_port  # noqa: E402
from runner.loading import store  # noqa: E402

MODEL = "smollm2:135m"
LINE = re.compile(r"\| (\d{3}) \|.*\| (\w+) +(\".*\")$")
DRIVER = r'''
import re
import sys
from playwright.sync_api import sync_playwright
url, chromium, out = sys.argv[1:4]
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, headless=True,
                                args=["--no-sandbox", "--disable-gpu", "--no-zygote",
                                      "--lang=en-US"])
    # a locale the page's Intl calls take: a container's POSIX locale makes Chromium report
    # en-US@posix, which throws in the page while it renders messages ("Loading..." stays)
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
    page.goto(url, wait_until="domcontentloaded", timeout=300000)
    box = page.locator("#chat-input")
    try:
        box.wait_for(timeout=180000)
    except Exception:
        page.screenshot(path=out, full_page=True)     # what stood in the way
        raise
    page.wait_for_timeout(3000)
    for _ in range(3):                        # the "what's new" dialog of a first visit
        okay = page.get_by_role("button", name=re.compile("okay|let's go|close", re.I))
        if okay.count():
            okay.first.click()
        page.keyboard.press("Escape")
        page.wait_for_timeout(500)
    box.click()
    page.keyboard.type("What is the capital of France?")
    page.keyboard.press("Enter")
    try:
        page.wait_for_url(re.compile("/c/"), timeout=120000)   # the chat's own page
    except Exception:
        pass
    page.wait_for_timeout(60000)              # the reply streams in (and the title, tags)
    page.screenshot(path=out, full_page=True)
    print("URL:", page.url)
    print("PAGE:", page.inner_text("body")[-800:])
    browser.close()
'''


def wait_for(url: str, process: subprocess.Popen, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} did not answer in {seconds} s")


def chromium_of(package: Path) -> tuple[str, dict]:
    """The executable @sparticuz/chromium unpacks, and the library path it needs."""
    script = ("require('@sparticuz/chromium').default.executablePath()"
              ".then(p => console.log(p))")
    found = subprocess.run(["node", "-e", script], cwd=package, capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()[-1]
    libraries = [str(p) for p in Path(tempfile.gettempdir()).glob("al*/lib") if p.is_dir()]
    return found, {"LD_LIBRARY_PATH": ":".join(libraries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="Open WebUI's venv")
    parser.add_argument("--chromium", help="a Chromium executable")
    parser.add_argument("--chromium-package", type=Path, help="a folder where npm installed "
                        "@sparticuz/chromium")
    parser.add_argument("--out", type=Path, default=Path("first-chat.png"))
    args = parser.parse_args()
    chromium, chromium_env = (args.chromium, {}) if args.chromium else \
        chromium_of(args.chromium_package)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        models = work / "store"
        models.mkdir()
        (models / store.CATALOG[MODEL].filename).symlink_to(store.pull(MODEL, progress=False))
        ours_port, webui_port = free_port(), free_port()
        log = work / "serve.log"
        ours = subprocess.Popen([sys.executable, "-m", "runner", "serve", "--port",
                                 str(ours_port)], stdout=log.open("w"), stderr=subprocess.STDOUT,
                                env={**os.environ, "RUNNER_MODELS": str(models)})
        webui = subprocess.Popen(
            [str(args.venv / "bin" / "open-webui"), "serve", "--port", str(webui_port)],
            stdout=(work / "webui.log").open("w"), stderr=subprocess.STDOUT,
            env={**os.environ, "OLLAMA_BASE_URL": f"http://127.0.0.1:{ours_port}",
                 "WEBUI_AUTH": "False", "ENABLE_OPENAI_API": "False", "DATA_DIR": str(work),
                 "DEFAULT_MODELS": MODEL, "OFFLINE_MODE": "True", "HF_HUB_OFFLINE": "1",
                 "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "False", "ENABLE_VERSION_UPDATE_CHECK":
                 "False"})
        try:
            wait_for(f"http://127.0.0.1:{ours_port}/", ours, 60)
            wait_for(f"http://127.0.0.1:{webui_port}/health", webui)
            driven = subprocess.run(
                [str(args.venv / "bin" / "python"), "-c", DRIVER,
                 f"http://127.0.0.1:{webui_port}/", chromium, str(args.out.resolve())],
                capture_output=True, text=True, timeout=1200,
                env={**os.environ, **chromium_env, "LANG": "en_US.UTF-8"})
            print(driven.stdout[-2000:], driven.stderr[-3000:])
        finally:
            for process in (webui, ours):
                process.terminate()
                process.wait(60)
        requests = [(int(m.group(1)), m.group(2), json.loads(m.group(3)))
                    for m in map(LINE.search, log.read_text().splitlines()) if m]
    print("| status | method | path |\n| --- | --- | --- |")
    for status, method, path in requests:
        print(f"| {status} | {method} | {path} |")
    failed = [r for r in requests if not 200 <= r[0] < 300]
    print(f"\n{len(requests)} requests from Open WebUI, {len(failed)} not 2xx; screenshot: "
          f"{args.out} ({'saved' if args.out.exists() else 'not saved'})")


if __name__ == "__main__":
    main()
