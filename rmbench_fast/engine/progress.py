"""Progress of a model pass: a tqdm bar on a terminal; elsewhere (a log file, CI) one plain line
every few seconds (RMBENCH_PROGRESS_SECONDS, default 10) and one at the end, instead of a flood
of carriage returns."""

from __future__ import annotations

import os
import sys
import time


class Progress:
    def __init__(self, total: int, lengths, desc: str = "scoring", enabled: bool = True, stream=None):
        self.total, self.lengths, self.desc = total, lengths, desc
        self.stream = stream or sys.stderr
        self.done = self.tokens = 0
        self.t0 = time.perf_counter()
        self.bar = None
        self.enabled = enabled
        self.every = float(os.environ.get("RMBENCH_PROGRESS_SECONDS", "10"))
        self.last_line = self.t0
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="seq", desc=desc, dynamic_ncols=True, file=self.stream,
                            mininterval=0.5)

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.t0, 1e-9)

    def skip(self, n: int):
        """Sequences finished before this process (resumed from the store)."""
        self.done += n
        if self.bar is not None:
            self.bar.update(n)

    def __call__(self, batch, new: int | None = None):
        """A batch computed; `new` of its sequences newly finished (default: all of them; fewer when
        a resumed run redoes a batch that was part done before an interruption)."""
        new = len(batch.indices) if new is None else new
        self.done += new
        self.tokens += int(self.lengths[batch.indices].sum())
        if self.bar is not None:
            self.bar.update(new)
            self.bar.set_postfix_str(f"{self.rate():,.0f} tok/s")
        elif self.enabled and time.perf_counter() - self.last_line >= self.every:
            self._line()

    def _line(self):
        self.last_line = time.perf_counter()
        pct = 100 * self.done / max(self.total, 1)
        print(f"{self.desc}: {self.done:,}/{self.total:,} sequences ({pct:.0f}%), {self.rate():,.0f} tokens/s, "
              f"{time.perf_counter() - self.t0:.0f} s", file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.tokens:
            self._line()
