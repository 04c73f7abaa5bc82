"""MkDocs hook: TeX math in the pages (``$...$`` inline, ``$$...$$`` on lines of their own)
becomes MathML when the site is built, so equations render in every current browser with no
script and no network (the docs are built and read offline too).

The math is swapped for placeholders before Markdown runs (so ``_`` and ``*`` inside it are not
emphasis) and the placeholders for MathML after, in each page's HTML. Code blocks and inline
code are left alone. A formula latex2mathml cannot read fails the build, naming the page.
"""

import re

import latex2mathml.converter

_FENCE = re.compile(r"^([ \t]*)(```|~~~).*?^\1\2[ \t]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_DISPLAY = re.compile(r"^\$\$[ \t]*\n(.+?)\n[ \t]*\$\$[ \t]*$", re.S | re.M)
_INLINE = re.compile(r"(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![$\w])")
_TOKEN = "kctxmath{}x"
_TOKEN_PATTERN = re.compile(r"(<p>)?kctxmath(\d+)x(</p>)?")

_formulas = {}  # page source path -> list of (MathML, display)


def _mathml(tex, display, page):
    try:
        mathml = latex2mathml.converter.convert(tex.strip(),
                                                display="block" if display else "inline")
    except Exception as error:  # latex2mathml raises its own exception types
        raise ValueError(f"{page}: cannot convert the formula {tex!r} to MathML: {error}") from error
    unknown = re.search(r">(\\[A-Za-z]+)<", mathml)  # a command it passed through as text
    if unknown:
        raise ValueError(f"{page}: latex2mathml does not know {unknown.group(1)} in the formula "
                         f"{tex!r}")
    return mathml


def _protect(text, pattern, marker):
    """Replace the matches of ``pattern`` by ``marker``-delimited indices (``marker`` a control
    character that Markdown text does not hold); returns the text and the matches."""
    kept = []

    def keep(match):
        kept.append(match.group(0))
        return f"{marker}{len(kept) - 1}{marker}"

    return pattern.sub(keep, text), kept


def _restore(text, kept, marker):
    return re.sub(f"{marker}(\\d+){marker}", lambda m: kept[int(m.group(1))], text)


def on_page_markdown(markdown, page, **kwargs):
    formulas = _formulas[page.file.src_uri] = []

    def replace(display):
        def swap(match):
            formulas.append((_mathml(match.group(1), display, page.file.src_uri), display))
            token = _TOKEN.format(len(formulas) - 1)
            return f"\n{token}\n" if display else token
        return swap

    text, fences = _protect(markdown, _FENCE, "\x01")
    text, spans = _protect(text, _CODE_SPAN, "\x02")
    text = _DISPLAY.sub(replace(True), text)
    text = _INLINE.sub(replace(False), text)
    return _restore(_restore(text, spans, "\x02"), fences, "\x01")


def on_page_content(html, page, **kwargs):
    formulas = _formulas.pop(page.file.src_uri, [])

    def swap(match):
        mathml, display = formulas[int(match.group(2))]
        if display:
            return mathml
        return f"{match.group(1) or ''}{mathml}{match.group(3) or ''}"

    return _TOKEN_PATTERN.sub(swap, html)
