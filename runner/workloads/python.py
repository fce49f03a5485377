#!/usr/bin/python3 -I
"""python: Debian's python3 with PYTHONMALLOC=malloc, an allocation-heavy script.

With PYTHONMALLOC=malloc every Python object (ints, strings, tuples, dicts, lists,
frames) comes from malloc, so the interpreter is a real program whose allocations all
go to the allocator under test. The script re-execs itself once with that setting (same
pid: the process is the one measured and the one that writes the allocator's stats).

Each operation builds one of four things, chosen and sized from (seed, op): a binary
tree of tuples (depth 6-9, the shape of the benchmarks game's binary-trees), a JSON
document serialised and parsed back, a word count over generated text, or a list of
small objects sorted by key. Its result joins a live set; each thread keeps the last
`live` results and checks every result's checksum before it drops it. With threads > 1,
thread t produces ops t, t+T, ... and hands every result to thread t+1, which keeps and
later frees it (frees cross threads; the GIL serialises the work). The digest (a sum of
per-op checksums) does not depend on thread timing.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import random
import sys
import threading
import time
import zlib
from typing import Any

sys.dont_write_bytecode = True  # no __pycache__ beside the installed scripts
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import macro_common as mc  # noqa: E402

ABOUT = ("Debian's python3 with PYTHONMALLOC=malloc (every object from the allocator under "
         "test): trees, JSON, word counts and sorted objects, kept live and checked.")
PARAMS = [
    mc.Param("threads", 1, "Python threads; results are freed by the next thread", 1, 256),
    mc.Param("ops", 2000, "operations (one tree, document, text or object list each)", 1,
             10**9),
    mc.Param("live", 250, "results each thread keeps alive (older ones are checked, freed)",
             1, 10**7),
    mc.Param("seed", 42, "seed of every choice and size", 0, 2**63 - 1),
]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "xe", "zu", "bra", "chi", "dro"]
MASK = (1 << 64) - 1


class Record:
    """A small object with an instance dict (several allocations each)."""

    def __init__(self, key: int, name: str, weight: float):
        self.key = key
        self.name = name
        self.weight = weight
        self.tags = [name[:2], name[-2:]]


def tree(depth: int) -> Any:
    return (tree(depth - 1), tree(depth - 1)) if depth else (None, None)


def tree_nodes(t: Any) -> int:
    left, right = t
    return 1 if left is None else 1 + tree_nodes(left) + tree_nodes(right)


def word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))


def build(seed: int, op: int) -> tuple[str, Any]:
    """Operation `op`: (kind, result); a pure function of (seed, op). Runs in the worker
    threads, so a wrong result raises (the main thread reports it and exits 1)."""
    rng = random.Random(seed * 1_000_003 + op)
    kind = rng.choices(("tree", "json", "text", "objects"), (30, 25, 25, 20))[0]
    if kind == "tree":
        depth = rng.randint(6, 9)
        t = tree(depth)
        if tree_nodes(t) != (1 << (depth + 1)) - 1:
            raise RuntimeError(f"op {op}: a tree of depth {depth} has the wrong node count")
        return kind, t
    if kind == "json":
        doc = {"id": op, "user": word(rng), "tags": [word(rng) for _ in range(rng.randint(0, 8))],
               "items": [{"sku": f"{word(rng)}-{rng.randrange(10**6)}", "qty": rng.randint(1, 9),
                          "price": rng.randrange(100, 10**6) / 100}
                         for _ in range(rng.randint(1, 40))]}
        back = json.loads(json.dumps(doc, sort_keys=True))
        if back != doc:
            raise RuntimeError(f"op {op}: the JSON round trip changed the document")
        return kind, back
    if kind == "text":
        text = " ".join(word(rng) for _ in range(rng.randint(50, 400)))
        counts: dict[str, int] = {}
        for w in text.split():
            counts[w] = counts.get(w, 0) + 1
        return kind, sorted(counts.items())
    recs = [Record(rng.randrange(10**9), word(rng), rng.random())
            for _ in range(rng.randint(20, 200))]
    recs.sort(key=lambda r: r.key)
    return kind, recs


def checksum(kind: str, obj: Any) -> int:
    """Computed when a result is made and again before it is freed: they must agree."""
    if kind == "tree":
        return tree_nodes(obj)
    if kind == "json":
        return zlib.crc32(json.dumps(obj, sort_keys=True).encode())
    if kind == "text":
        return zlib.crc32("".join(f"{w}{c}" for w, c in obj).encode())
    return int(sum(r.key + len(r.name) + len(r.tags) for r in obj)) & MASK


class Worker:
    def __init__(self, index: int, params: dict[str, Any], inbox: queue.SimpleQueue[Any]):
        self.index = index
        self.p = params
        self.inbox = inbox
        self.outbox: queue.SimpleQueue[Any] = inbox
        self.ring: collections.deque[tuple[int, str, Any, int]] = collections.deque()
        self.digest = 0
        self.made = 0
        self.freed = 0
        self.ended = False  # the previous thread's end mark arrived
        self.error: BaseException | None = None

    def keep(self, item: tuple[int, str, Any, int]) -> None:
        self.ring.append(item)
        while len(self.ring) > self.p["live"]:
            self.drop()

    def drop(self) -> None:
        op, kind, obj, cs = self.ring.popleft()
        if checksum(kind, obj) != cs:
            raise RuntimeError(f"op {op}: a {kind} result changed while it was live")
        self.freed += 1

    def drain(self, block: bool) -> None:
        """Keep what the previous thread sent (all of it, when `block`: up to its end mark)."""
        while not self.ended:
            try:
                item = self.inbox.get(block=block)
            except queue.Empty:
                return
            if item is None:
                self.ended = True
            else:
                self.keep(item)

    def run(self) -> None:
        try:
            threads, seed = self.p["threads"], self.p["seed"]
            for op in range(self.index, self.p["ops"], threads):
                kind, obj = build(seed, op)
                cs = checksum(kind, obj)
                self.digest = (self.digest + (op + 1) * cs) & MASK
                self.made += 1
                self.outbox.put((op, kind, obj, cs))
                del obj
                self.drain(block=False)
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.outbox.put(None)  # the next thread stops waiting even after an error
        try:
            self.drain(block=True)
            while self.ring:
                self.drop()
        except BaseException as e:
            self.error = self.error or e


def main() -> None:
    mc.reexec_with({"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"})
    p = mc.parse_params(ABOUT, PARAMS, sys.argv[1:])
    if sys.getallocatedblocks() != 0:
        mc.fail("pymalloc is in use: PYTHONMALLOC=malloc did not take effect")
    workers = [Worker(i, p, queue.SimpleQueue()) for i in range(p["threads"])]
    for i, w in enumerate(workers):
        w.outbox = workers[(i + 1) % len(workers)].inbox
    threads = [threading.Thread(target=w.run, name=f"worker-{w.index}") for w in workers]
    start, cpu_start = time.monotonic(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds, cpu_seconds = time.monotonic() - start, time.process_time() - cpu_start
    for w in workers:
        if w.error is not None:
            mc.fail(f"thread {w.index}: {w.error}")
    made, freed = sum(w.made for w in workers), sum(w.freed for w in workers)
    if made != p["ops"] or freed != p["ops"]:
        mc.fail(f"made {made} and freed {freed} results, not {p['ops']}")
    hwm = mc.vm_hwm_bytes()
    if hwm is None:
        mc.fail("cannot read the peak RSS from /proc/self/status")
    digest = 0
    for w in workers:
        digest = (digest + w.digest) & MASK
    mc.print_result("python", p, p["ops"], seconds, hwm,
                    cpu_seconds=round(cpu_seconds, 6),
                    python_version=".".join(map(str, sys.version_info[:3])),
                    digest=f"{digest:016x}")


if __name__ == "__main__":
    main()
