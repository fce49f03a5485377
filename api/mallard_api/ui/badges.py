"""Images for a README: a badge (a label and a message, shields-style) and a page's trend
plot as a standalone SVG (its styles inside it: an `<img>` loads no stylesheet) or a PNG
(the same SVG rasterised by CairoSVG, on the system's libcairo).

The standalone styles are the pages' own: the `svg.plot` rules of `static/mallard.css`,
their `var(--...)` colours resolved, so a plot looks the same on the page, in an SVG and
in a PNG."""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import cairosvg  # type: ignore[import-untyped]
from markupsafe import Markup

from mallard_api.ui.svg import SVG_NS

_CSS = (Path(__file__).parent / "static" / "mallard.css").read_text(encoding="utf-8")
VERDICT_COLOURS = {"regressed": "#c62828", "improved": "#2e7d32", "same": "#4c8f5a",
                   "unknown": "#b26a00"}
GREY = "#68717c"


def _plot_css(css: str) -> str:
    """The `svg.plot` rules of the pages' stylesheet, their variables resolved."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    names = dict(re.findall(r"--([\w-]+):\s*([^;]+);", css))
    rules = []
    for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        if "svg.plot" in selector and ":hover" not in selector:
            resolved = re.sub(r"var\(--([\w-]+)\)", lambda m: names.get(m.group(1), "#000"),
                              body)
            rules.append(f"{' '.join(selector.split())} {{{' '.join(resolved.split())}}}")
    return "svg.plot text { font-family: 'DejaVu Sans', Verdana, sans-serif; }\n" + \
        "\n".join(rules)


PLOT_CSS = _plot_css(_CSS)


def standalone(plot: Markup, title: str) -> str:
    """A page's plot (`svg.trend_plot`) as a file of its own: a white background, a title
    line above it, the styles inside."""
    head, rest = str(plot).split(">", 1)
    width = int(re.search(r'width="(\d+)"', head).group(1))  # type: ignore[union-attr]
    height = int(re.search(r'height="(\d+)"', head).group(1))  # type: ignore[union-attr]
    inner = rest.rsplit("</svg>", 1)[0]
    top = 20
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="{SVG_NS}" class="plot trend" width="{width}" '
            f'height="{height + top}" viewBox="0 0 {width} {height + top}" role="img" '
            f"aria-label={quoteattr(title)}><style>{escape(PLOT_CSS)}</style>"
            f'<rect width="100%" height="100%" fill="#ffffff"/>'
            f'<text x="4" y="13" class="rowlabel">{escape(title)}</text>'
            f'<g transform="translate(0,{top})">{inner}</g></svg>')


def png(svg_text: str, scale: float = 2.0) -> bytes:
    """The SVG rasterised (twice its size by default: sharp on high-density screens)."""
    out: bytes = cairosvg.svg2png(bytestring=svg_text.encode("utf-8"), scale=scale,
                                  unsafe=False)
    return out


def _text_width(text: str) -> int:
    """About how wide `text` is at 11px Verdana (no font metrics on the server)."""
    return 10 + sum(7 if ch.isupper() or ch in "mwMW%" else 6 for ch in text)


def badge(label: str, message: str, colour: str) -> str:
    """A two-part badge: `label` on grey, `message` on `colour`."""
    lw, mw = _text_width(label), _text_width(message)
    w = lw + mw
    text = f"{label}: {message}"
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="{SVG_NS}" width="{w}" height="20" viewBox="0 0 {w} 20" role="img" '
            f"aria-label={quoteattr(text)}><title>{escape(text)}</title>"
            f'<rect width="{lw}" height="20" fill="#555"/>'
            f'<rect x="{lw}" width="{mw}" height="20" fill={quoteattr(colour)}/>'
            f'<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" '
            f'text-anchor="middle">'
            f'<text x="{lw / 2:.1f}" y="14" class="label">{escape(label)}</text>'
            f'<text x="{lw + mw / 2:.1f}" y="14" class="message">{escape(message)}</text>'
            f"</g></svg>")
