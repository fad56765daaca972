"""What a person opening report.html must see: every image a PNG that decodes, Markdown rendered
(no literal ``**`` or backticks in the page's text), verdict details nested under their verdict;
and, where Debian's ``chromium`` is installed, the page loaded headless with no broken image and
no console error."""

from __future__ import annotations

import base64
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """The page's image sources, its text outside code, and how deep each list item sits."""

    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.text: list[str] = []
        self.list_depths: list[int] = []
        self._code = self._lists = 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        elif tag in ("pre", "code"):
            self._code += 1
        elif tag == "ul":
            self._lists += 1
        elif tag == "li":
            self.list_depths.append(self._lists)

    def handle_endtag(self, tag):
        if tag in ("pre", "code"):
            self._code -= 1
        elif tag == "ul":
            self._lists -= 1

    def handle_data(self, data):
        if not self._code:
            self.text.append(data)


def check_report_html(out: Path) -> _Page:
    """Parse ``out/report.html`` and assert what the module docstring says; returns the parsed page."""
    markdown_text = (out / "report.md").read_text(encoding="utf-8")
    page = _Page()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    assert len(page.images) == markdown_text.count("\n![") and page.images
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix), src[:80]
        data = base64.b64decode(src[len(prefix) :], validate=True)
        assert len(data) > len(PNG_SIGNATURE) and data.startswith(PNG_SIGNATURE), src[:80]
    text = "".join(page.text)
    assert "**" not in text and "`" not in text
    return page


def browser_errors(report: Path, tmp_path: Path) -> list[str]:
    """Load ``report`` in headless Chromium; the broken images and console errors it finds."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium"
    probe = (
        "<script>window.addEventListener('load', () => { const broken = [...document.images]"
        ".filter(i => !(i.complete && i.naturalWidth > 0)).length;"
        " document.body.setAttribute('data-broken', String(broken)); });</script>"
    )
    page = tmp_path / "probed.html"
    page.write_text(report.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    if 'data-broken="0"' not in done.stdout:
        marker = done.stdout.partition("data-broken=")[2][:8] or "(the page did not load)"
        errors.append(f"broken images: {marker}")
    return errors
