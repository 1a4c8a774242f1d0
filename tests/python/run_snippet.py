"""Runs the code the dashboard's first-run page shows, as an operator would paste it.

Run by the Rust integration suite (tests/dashboard/first_run.rs) as
`python run_snippet.py <file>`: the file holds the snippet exactly as the page showed
it (the proxy's address and the spendgate key already in it). Prints one JSON object
with what the snippet printed, and exits non-zero when the snippet fails.
"""

import contextlib
import io
import json
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    code = f.read()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    exec(compile(code, "snippet.py", "exec"), {"__name__": "__main__"})
print(json.dumps({"printed": out.getvalue()}))
