"""Hostile strings: text a researcher did not write (scraped pages, user reviews, clinical free text) that would
run, break out or mislead if a renderer passed it through. tests/test_hostile.py runs every one through every
renderer; tests/test_browser.py opens the pages in Chromium.
"""

from __future__ import annotations

#: What each string attacks, then the string. At least 30 (issue 33).
HOSTILE: dict[str, str] = {
    "script tag": "<script>alert('script')</script>",
    "script tag, upper case": "<SCRIPT SRC=//example.invalid/x.js></SCRIPT>",
    "image onerror": "<img src=x onerror=alert('img')>",
    "svg onload": "<svg/onload=alert('svg')>",
    "body onload": "<body onload=alert('body')>",
    "attribute break-out, double quote": '"><script>alert("dq")</script>',
    "attribute break-out, single quote": "'><b onmouseover=alert('sq')>x</b>",
    "javascript: URL": "javascript:alert('url')",
    "anchor with javascript: URL": "<a href=\"javascript:alert('a')\">click</a>",
    "iframe with data: URL": '<iframe src="data:text/html,<script>alert(1)</script>"></iframe>',
    "closing script inside JSON": "</script><script>alert('json')</script>",
    "HTML comment opener": "<!--",
    "CDATA end": "]]>",
    "style injection": "<style>body{display:none}</style>",
    "pre-escaped entity": "&lt;script&gt;alert('entity')&lt;/script&gt;",
    "template expression": "{{7*7}}",
    "template literal": "${7*7}",
    "Jinja statement": "{% raw %}{{ config }}{% endraw %}",
    "LaTeX \\input": "\\input{/etc/passwd}",
    "LaTeX \\write18": "\\immediate\\write18{touch /tmp/attnlens-pwned}",
    "LaTeX end of document": "}\\end{document}",
    "unbalanced braces": "{{{ }} {",
    "LaTeX math and comment": "$\\alpha$ 100% $$ ^_~ # &",
    "backslashes": "\\\\ \\par \\newline C:\\Users\\x",
    "spreadsheet formula": "=cmd|' /C calc'!A0",
    "spreadsheet plus": "+1+1",
    "spreadsheet minus": "-2+3",
    "spreadsheet at": "@SUM(1+1)",
    "spreadsheet tab": "\t=1+1",
    "Markdown table and link": "| a | [link](javascript:alert('md')) |",
    "Markdown emphasis and heading": "# **bold** _it_ `code`",
    "line breaks": "line one\nline two\r\n% not a comment\u2028sep",
    "right-to-left override": "abc\u202eevil\u202cdef",
    "zero-width characters": "a\u200bb\u200dc\ufeffd",
    "control characters": "bell\x07 esc\x1b[31mred",
    "4-byte emoji": "😀🧪👩‍⚕️",
    "SQL": "'; DROP TABLE notes; --",
}

#: A class name, an example id and a document built from them (no "/": they name folders and files too).
HOSTILE_CLASS = "neuro \"><img src=x onerror=alert('class')>{{7*7}}"
HOSTILE_ID = "note 02 <svg onload=alert('id')> =HYPERLINK(\"x\") $\\input{x}$"
HOSTILE_TEXT = " ".join(v.replace("\n", " ").replace("\r", " ") for v in HOSTILE.values())
