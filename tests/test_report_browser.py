"""`blockcli report` pages in a real browser (headless Chromium, Debian's `chromium`): they load with no
console error and no request but the page itself, render non-blank at 1280 px and at a phone's 390 px
with no sideways scrolling of the page, hold every section, and show the numbers `count --json` and
`verify --json` give. Skipped, saying why, where Chromium is not installed (`.ci/run` installs it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from browser import Browser, find_chromium, ink, open_file, png_size
from conftest import ROOT

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium); "
                                                          "the report's browser tests need a real browser")
GEMMA3 = ROOT / "tests" / "fixtures" / "hf" / "gemma3_text"
SECTIONS = ["overview", "architecture", "parameters", "shapes", "attention", "cost", "checklist"]
WIDTHS = {"desktop": (1280, False), "phone": (390, True)}

# what the page shows, read back from the rendered DOM (innerText, as a reader sees it)
READ = """(() => {
  const text = e => e ? e.innerText.trim() : null;
  const figures = {}; document.querySelectorAll('[data-figure]').forEach(e => {
    if (e.tagName === 'DD') figures[e.dataset.figure] = text(e); });
  const components = [...document.querySelectorAll('section#parameters tr[data-component]')].map(
    r => [r.dataset.component, r.dataset.group ?? null, text(r.querySelector('td.count'))]);
  const checks = [...document.querySelectorAll('section#checklist tr[data-check]')].map(
    r => [Number(text(r.querySelector('td.num'))), text(r.querySelector('td.status')), text(r.querySelector('td.measured'))]);
  const sections = [...document.querySelectorAll('section')].map(s => s.id);
  const heights = [...document.querySelectorAll('section')].map(s => s.getBoundingClientRect().height);
  const svgs = [...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width);
  return {figures, components, checks, sections, heights, svgs,
          pageWidth: document.documentElement.scrollWidth, viewport: innerWidth,
          reconciled: document.querySelector('[data-reconciled]')?.dataset.reconciled};
})()"""


def write(tmp_path, name, *args):
    path = tmp_path / f"{name}.html"
    out = subprocess.run([sys.executable, "-m", "blockcli", "report", *args, "-o", str(path)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return path


def cli_json(*args):
    out = subprocess.run([sys.executable, "-m", "blockcli", *args, "--json"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def browser():
    with Browser(CHROMIUM) as b:
        yield b


@pytest.mark.parametrize("source", ["llama-3.1-8b", str(GEMMA3)], ids=["llama-3.1-8b", "gemma3_text"])
def test_page_in_a_browser(browser, tmp_path, source):
    path = write(tmp_path, "page", source)
    count, verify = cli_json("count", source), cli_json("verify", source)
    for label, (width, mobile) in WIDTHS.items():
        tab = open_file(browser, path, width, mobile)
        try:
            assert tab.problems() == [], label
            assert tab.requests() == [path.resolve().as_uri()], label  # the page itself, nothing else
            seen = tab.evaluate(READ)
            assert seen["sections"] == SECTIONS
            assert all(h > 40 for h in seen["heights"]), seen["heights"]  # every section has content
            assert seen["viewport"] == width and seen["pageWidth"] <= width, label  # tables scroll, not the page
            assert seen["svgs"] and all(0 < w <= width for w in seen["svgs"])
            png = tab.screenshot()
            assert png_size(png)[0] == width
            shot_width, height, share, colours = ink(browser, png)
            assert shot_width == width and height > 2000
            assert share > 0.03 and colours > 50, (label, share, colours)  # text, charts and diagrams drew
            viewport = tab.screenshot(full_page=False)
            assert png_size(viewport) == (width, 900)
            assert ink(browser, viewport)[2] > 0.02
        finally:
            tab.close()
        figures = seen["figures"]
        assert int(figures["total"].replace(",", "")) == count["total"]
        assert int(figures["non_embedding"].replace(",", "")) == count["non_embedding"]
        assert int(figures["memory"].replace(",", "")) == count["inference"]["memory_bytes"]
        assert [(c[0], c[2]) for c in seen["components"]] == [(c["name"], f"{c['count']:,}")
                                                               for c in count["components"]]
        assert seen["reconciled"] == ("match" if count["reconciled"]["match"] else "MISMATCH")
        assert [(c[0], c[1]) for c in seen["checks"]] == [(c["id"], c["status"]) for c in verify["checks"]]
        assert [c[2] for c in seen["checks"]] == [" ".join(c["measured"].split()) for c in verify["checks"]]


def test_comparison_in_a_browser(browser, tmp_path):
    path = write(tmp_path, "pair", "gemma-3-1b", "gemma-2b")
    for label, (width, mobile) in WIDTHS.items():
        tab = open_file(browser, path, width, mobile)
        try:
            assert tab.problems() == [] and tab.requests() == [path.resolve().as_uri()], label
            seen = tab.evaluate("""(() => ({
              sections: [...document.querySelectorAll('section')].map(s => s.id),
              diff: [...document.querySelectorAll('section#differences tr.diff')].map(r => r.innerText.split('\\t')[0]),
              background: getComputedStyle(document.querySelector('section#differences tr.diff td')).backgroundColor,
              pageWidth: document.documentElement.scrollWidth,
              sideBySide: (() => { const [a, b] = document.querySelectorAll('#overview > .side');
                return a.getBoundingClientRect().top === b.getBoundingClientRect().top; })()}))()""")
            assert seen["sections"] == ["differences"] + [f"{side}-{s}" for s in SECTIONS for side in "ab"]
            assert "parameters" in seen["diff"] and "block.sliding_window" in seen["diff"]
            assert seen["background"] not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")  # highlighted
            assert seen["pageWidth"] <= width
            assert seen["sideBySide"] == (width >= 1100)  # two columns on a wide screen, one on a phone
            assert ink(browser, tab.screenshot())[2] > 0.03
        finally:
            tab.close()
