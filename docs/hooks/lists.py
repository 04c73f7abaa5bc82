"""MkDocs hook: the pages' lists are written for CommonMark (GitHub), where a list item's
continuation, a nested list, table or code block is indented by 2 spaces; Python-Markdown,
which MkDocs uses, wants 4. Inside lists this doubles the indentation of every line, and shifts
a fenced code block by as much as its fence moved (its content keeps its own indentation), and
puts a blank line before an item that follows a multi-paragraph item (Python-Markdown would
read it as that item's text), so the same Markdown reads the same on GitHub and on the site.
"""

import re

_ITEM = re.compile(r"^(\s*)([-*+]|\d+\.) ")
_FENCE = re.compile(r"^(\s*)(```|~~~)")


def indent_lists(markdown):
    lines, out = markdown.split("\n"), []
    in_list, fence, shift, loose = False, None, 0, False
    for line in lines:
        if fence is not None:  # inside a fenced block that sits in a list
            out.append(" " * shift + line if line.strip() else line)
            if line.strip().startswith(fence):
                fence = None
            continue
        indent = len(line) - len(line.lstrip(" "))
        if _ITEM.match(line):
            if in_list and loose and out and out[-1].strip():
                out.append("")
            in_list, loose = True, False
        elif line.strip() and indent == 0:
            in_list = False  # a paragraph, heading or table outside any list
        if not in_list or not line.strip():
            loose = loose or (in_list and not line.strip())
            out.append(line)
            continue
        opening = _FENCE.match(line)
        if opening and indent:
            fence, shift = opening.group(2), indent
        out.append(" " * indent + line)
    return "\n".join(out)


def on_page_markdown(markdown, **kwargs):
    return indent_lists(markdown)
