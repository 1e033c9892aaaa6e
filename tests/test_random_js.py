"""The explorer's random.js draws numpy's random stream bit for bit.

node runs toyrl/explorer/random.js and prints what it drew; numpy computes the same here, and the two
must agree exactly: raw 64-bit outputs and seed-sequence words as decimal strings, floats as the hex
of their bit patterns. Every expected value comes from numpy, never from the JavaScript.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

NODE = shutil.which("node")
if NODE is None and os.environ.get("CI"):
    raise RuntimeError("CI needs node for random.js; .ci/run installs it")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed: random.js cannot be run")

RANDOM_JS = Path(__file__).resolve().parents[1] / "toyrl" / "explorer" / "random.js"

SEED_128 = 0x9E3779B97F4A7C15_F39CC0605CEDC834
SEEDS = [0, 1, 5, 123456789, 2**32 + 7, 2**63 + 11, 2**64 - 1, SEED_128]
SEED_IDS = ["0", "1", "5", "123456789", "2^32+7", "2^63+11", "2^64-1", "128-bit"]

# The node side: reads one JSON request on stdin, prints one JSON answer. Integers travel as decimal
# strings, floats as 16 hex digits of their bits.
DRIVER = r"""
"use strict";
const R = require(process.argv[2]);
const req = JSON.parse(require("fs").readFileSync(0, "utf8"));

const view = new DataView(new ArrayBuffer(8));
function hex(x) { view.setFloat64(0, x); return view.getBigUint64(0).toString(16).padStart(16, "0"); }
const hexes = (xs) => Array.from(xs, hex);
const strs = (xs) => Array.from(xs, (x) => x.toString());
const entropy = (e) => (Array.isArray(e) ? e.map(BigInt) : BigInt(e));
function words(seq, n) {
  return { key: strs(seq.spawnKey), u32: strs(seq.generateState(n, "uint32")),
           u64: strs(seq.generateState(n, "uint64")), spawned: seq.nChildrenSpawned };
}
const combine = (hi, lo) => ((BigInt(hi) << 32n) | BigInt(lo)).toString();

function draws(g, nRaw, nRandom, nOpen) {
  const st = g.getState(), raw = [];
  const third = Math.floor(nRaw / 3);
  for (let i = 0; i < third; i++) raw.push(g.rawBigInt().toString());
  const parts = [0, 0];
  for (let i = 0; i < third; i++) { g.nextUint64Parts(parts); raw.push(combine(parts[0], parts[1])); }
  const rest = nRaw - 2 * third, packed = g.fillParts(rest);
  for (let i = 0; i < rest; i++) raw.push(combine(packed[2 * i], packed[2 * i + 1]));
  const random = [], open = [];
  const half = Math.floor(nRandom / 2);
  for (let i = 0; i < half; i++) random.push(g.random());
  random.push(...g.fill(nRandom - half, "random"));
  const halfOpen = Math.floor(nOpen / 2);
  for (let i = 0; i < halfOpen; i++) open.push(g.openUniform());
  const buffer = new Float64Array(nOpen - halfOpen + 3);
  g.fill(nOpen - halfOpen, "open", buffer, 3);
  open.push(...buffer.subarray(3));
  return { state: st.state.toString(), inc: st.inc.toString(), raw,
           random: hexes(random), open: hexes(open) };
}

const out = {};
if (req.cmd === "seedseq") {
  const e = entropy(req.entropy);
  const root = new R.SeedSequence(e, [], req.poolSize);
  out.root = words(root, req.nWords);
  out.pool = strs(root.pool);
  if (req.asNumber) out.rootNumber = words(new R.SeedSequence(Number(req.entropy)), req.nWords);
  if (req.asString) out.rootString = words(new R.SeedSequence(req.entropy), req.nWords);
  const first = root.spawn(3), second = root.spawn(2);
  out.children = first.concat(second).map((c) => words(c, req.nWords));
  out.rootSpawned = root.nChildrenSpawned;
  const grand = first[1].spawn(2).concat(first[1].spawn(1));
  out.grandchildren = grand.map((c) => words(c, req.nWords));
  out.greatGrandchild = words(grand[2].spawn(1)[0], req.nWords);
  out.childSpawned = first[1].nChildrenSpawned;
  out.direct = words(new R.SeedSequence(e, [7, 0, 2 ** 40], req.poolSize), req.nWords);
} else if (req.cmd === "streams") {
  const gens = R.runStreams(entropy(req.seed));
  out.streams = gens.map((g) => draws(g, req.nRaw, req.nRandom, req.nOpen));
  out.extra = gens.spawn(2).map((g) => draws(g, 300, 300, 300));
  out.rootSpawned = gens.root.nChildrenSpawned;
  out.fromNumber = req.safe ? draws(R.runStreams(Number(req.seed))[3], 50, 50, 50) : null;
} else if (req.cmd === "long") {
  const g = R.runStreams(entropy(req.seed))[req.child];
  const values = new Float64Array(req.n);
  const half = Math.floor(req.n / 2);
  g.fill(half, "random", values);
  for (let i = half; i < req.n; i++) values[i] = g.random();
  out.picked = hexes(req.indices.map((i) => values[i]));
  out.tail = hexes(values.subarray(req.n - req.tail));
  out.next = [];
  for (let i = 0; i < 5; i++) out.next.push(g.rawBigInt().toString());
  out.open = hexes(g.fill(req.nOpen, "open"));
  out.openNext = g.rawBigInt().toString();
} else if (req.cmd === "perm") {
  const g = R.runStreams(entropy(req.seed))[req.child];
  out.prefixes = req.cases.map(([n, P, B]) => Array.from(R.permutationPrefixes(g, n, P, B)));
  out.next = g.rawBigInt().toString();
} else if (req.cmd === "ties") {
  const u = Float64Array.from(req.values);
  out.prefixes = req.cases.map(([P, B]) => {
    const rows = [];
    for (let r = 0; r * P < u.length; r++) rows.push(Array.from(R.permutationPrefix(u, P, B, r * P)));
    return rows;
  });
} else if (req.cmd === "errors") {
  out.errors = req.entropies.map((e) => {
    try { new R.SeedSequence(e); return null; } catch (err) { return err.name; }
  });
}
process.stdout.write(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("random_js") / "driver.js"
    path.write_text(DRIVER, encoding="utf-8")
    return path


def run_js(driver: Path, request: dict) -> dict:
    assert NODE is not None
    proc = subprocess.run(
        [NODE, str(driver), str(RANDOM_JS)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hexes(values: np.ndarray) -> list[str]:
    return [f"{int(v):016x}" for v in np.asarray(values, dtype=np.float64).view(np.uint64)]


def strs(values) -> list[str]:
    return [str(int(v)) for v in values]


def open_uniform(rng: np.random.Generator, n: int) -> np.ndarray:
    raw = rng.bit_generator.random_raw(n)
    return ((raw >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52


def words(seq: np.random.SeedSequence, n: int) -> dict:
    return {
        "key": strs(seq.spawn_key),
        "u32": strs(seq.generate_state(n, np.uint32)),
        "u64": strs(seq.generate_state(n, np.uint64)),
        "spawned": seq.n_children_spawned,
    }


def draws(rng: np.random.Generator, n_raw: int, n_random: int, n_open: int) -> dict:
    state = rng.bit_generator.state["state"]
    return {
        "state": str(state["state"]),
        "inc": str(state["inc"]),
        "raw": strs(rng.bit_generator.random_raw(n_raw)),
        "random": hexes(rng.random(n_random)),
        "open": hexes(open_uniform(rng, n_open)),
    }


def seed_sequence_expected(entropy, pool_size: int, n_words: int) -> dict:
    root = np.random.SeedSequence(entropy, pool_size=pool_size)
    expected = {"root": words(root, n_words), "pool": strs(root.pool)}
    first, second = root.spawn(3), root.spawn(2)
    expected["children"] = [words(c, n_words) for c in first + second]
    expected["rootSpawned"] = root.n_children_spawned
    grand = first[1].spawn(2) + first[1].spawn(1)
    expected["grandchildren"] = [words(c, n_words) for c in grand]
    expected["greatGrandchild"] = words(grand[2].spawn(1)[0], n_words)
    expected["childSpawned"] = first[1].n_children_spawned
    direct = np.random.SeedSequence(entropy, spawn_key=(7, 0, 2**40), pool_size=pool_size)
    expected["direct"] = words(direct, n_words)
    return expected


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_seed_sequence_words(driver: Path, seed: int) -> None:
    safe = seed < 2**53
    got = run_js(
        driver,
        {
            "cmd": "seedseq",
            "entropy": str(seed),
            "poolSize": 4,
            "nWords": 9,
            "asNumber": safe,
            "asString": True,
        },
    )
    expected = seed_sequence_expected(seed, 4, 9)
    for key, value in expected.items():
        assert got[key] == value, key
    # the spawn numbering continues across calls, and children carry the parent's key + (i,)
    assert [c["key"] for c in got["children"]] == [[str(i)] for i in range(5)]
    assert [c["key"] for c in got["grandchildren"]] == [["1", str(i)] for i in range(3)]
    assert got["rootSpawned"] == 5 and got["childSpawned"] == 3
    assert got["rootString"] == expected["root"]
    if safe:
        assert got["rootNumber"] == expected["root"]


@pytest.mark.parametrize(
    ("entropy", "pool_size"),
    [
        ([1, 2**40, 0], 4),
        ([0], 4),
        ([], 4),
        ([2**64 - 1, 3, 2**100 + 5, 0, 17, 2**31], 4),
        (2**200 + 3, 4),
        (42, 8),
        ([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], 8),
    ],
    ids=["list", "zero-list", "empty-list", "long-list", "200-bit", "pool8", "pool8-long"],
)
def test_seed_sequence_other_entropy(driver: Path, entropy, pool_size: int) -> None:
    request_entropy = [str(e) for e in entropy] if isinstance(entropy, list) else str(entropy)
    got = run_js(driver, {"cmd": "seedseq", "entropy": request_entropy, "poolSize": pool_size, "nWords": 11})
    expected = seed_sequence_expected(entropy, pool_size, 11)
    for key, value in expected.items():
        assert got[key] == value, key


def test_seed_sequence_rejects_what_numpy_rejects(driver: Path) -> None:
    got = run_js(driver, {"cmd": "errors", "entropies": [-1, 1.5, "abc", [1, [2]], 2**60]})
    for e in [-1, 1.5, "abc"]:
        with pytest.raises((ValueError, TypeError)):
            np.random.SeedSequence(e).generate_state(1)
    # nested sequences: numpy's current source refuses them (older releases flattened them)
    # 2**60 is not a safe integer as a JS Number: refused rather than silently rounded
    assert got["errors"][:4] == ["RangeError", "TypeError", "RangeError", "TypeError"]
    assert got["errors"][4] == "RangeError"


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_run_streams(driver: Path, seed: int) -> None:
    n_raw, n_random, n_open = 3000, 2500, 2500
    got = run_js(
        driver,
        {
            "cmd": "streams",
            "seed": str(seed),
            "nRaw": n_raw,
            "nRandom": n_random,
            "nOpen": n_open,
            "safe": seed < 2**53,
        },
    )
    root = np.random.SeedSequence(seed)
    rngs = [np.random.default_rng(child) for child in root.spawn(6)]
    assert len(got["streams"]) == 6
    for k, rng in enumerate(rngs):
        expected = draws(rng, n_raw, n_random, n_open)
        for key, value in expected.items():
            assert got["streams"][k][key] == value, (k, key)
    # a later spawn from the same root (e.g. a refill stream) continues the numbering: children 6, 7
    extra = [np.random.default_rng(child) for child in root.spawn(2)]
    for k, rng in enumerate(extra):
        assert got["extra"][k] == draws(rng, 300, 300, 300), k
    assert got["rootSpawned"] == 8
    if seed < 2**53:
        assert got["fromNumber"] == draws(
            np.random.default_rng(np.random.SeedSequence(seed).spawn(6)[3]), 50, 50, 50
        )


@pytest.mark.parametrize(("seed", "child"), [(7, 2), (2**64 - 1, 5)], ids=["7", "2^64-1"])
def test_long_run(driver: Path, seed: int, child: int) -> None:
    n = 2**20 + 4321
    indices = sorted({0, 1, 2**20 - 1, 2**20, n // 2 - 1, n // 2, *range(0, n, 65537)})
    got = run_js(
        driver,
        {
            "cmd": "long",
            "seed": str(seed),
            "child": child,
            "n": n,
            "indices": indices,
            "tail": 1000,
            "nOpen": 2**20 + 3,
        },
    )
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(6)[child])
    values = rng.random(n)
    assert got["picked"] == hexes(values[indices])
    assert got["tail"] == hexes(values[-1000:])
    assert got["next"] == strs(rng.bit_generator.random_raw(5))
    open_values = open_uniform(rng, 2**20 + 3)
    assert got["open"] == hexes(open_values)
    assert got["openNext"] == str(int(rng.bit_generator.random_raw()))
    assert 0.0 < open_values.min() and open_values.max() < 1.0


@pytest.mark.parametrize(
    ("seed", "child"), [(0, 0), (123456789, 4), (SEED_128, 1)], ids=["0", "123456789", "128-bit"]
)
def test_permutation_prefixes(driver: Path, seed: int, child: int) -> None:
    cases = [
        [5, 10, 3],
        [4, 100, 10],
        [3, 50, 50],
        [2, 1000, 100],
        [3, 7, 10],
        [6, 40, 1],
        [2, 300, 64],
        [2, 300, 65],
    ]
    got = run_js(driver, {"cmd": "perm", "seed": str(seed), "child": child, "cases": cases})
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(6)[child])
    for (n, p, b), prefix in zip(cases, got["prefixes"], strict=True):
        expected = rng.random((n, p)).argsort(axis=-1, kind="stable")[:, :b]
        assert prefix == expected.ravel().tolist(), (n, p, b)
    assert got["next"] == str(int(rng.bit_generator.random_raw()))


def test_permutation_prefix_ties_by_index(driver: Path) -> None:
    # few distinct values, so most comparisons are ties: a stable argsort keeps them in index order
    rng = np.random.default_rng(2024)
    values = np.floor(rng.random(600) * 5) / 4
    cases = [[10, 4], [20, 20], [100, 7], [100, 100], [200, 64], [200, 65], [600, 600]]
    got = run_js(driver, {"cmd": "ties", "values": values.tolist(), "cases": cases})
    for (p, b), rows in zip(cases, got["prefixes"], strict=True):
        expected = values.reshape(-1, p).argsort(axis=-1, kind="stable")[:, :b]
        assert rows == expected.tolist(), (p, b)


def test_random_js_is_a_plain_script() -> None:
    text = RANDOM_JS.read_text(encoding="utf-8")
    assert text.startswith('"use strict";')
    assert "const toyrlRandom = (function () {" in text
    assert text.rstrip().endswith('if (typeof module !== "undefined") module.exports = toyrlRandom;')
    assert "</script" not in text.lower()
