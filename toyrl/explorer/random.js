"use strict";
/* numpy's random stream in plain JavaScript: SeedSequence and PCG64, bit for bit.

  Python's side of a run with seed s:
      children = np.random.SeedSequence(s).spawn(6)
      rngs = [np.random.default_rng(c) for c in children]      # Generator(PCG64(c))
  and from each generator only raw 64-bit outputs, converted as
      random()       = (next_uint64 >> 11) * 2**-53           in [0, 1)   (Generator.random, float64)
      openUniform()  = ((next_uint64 >> 12) + 0.5) * 2**-52   in (0, 1)
      permutation prefixes: rng.random((n, P)).argsort(axis=-1, kind="stable")[:, :B]
  This file reproduces those streams exactly, so a seed on the page is the same run as in Python.

  API (the global `toyrlRandom`, also module.exports under node):

  new SeedSequence(entropy, spawnKey = [], poolSize = 4, nChildrenSpawned = 0)
      numpy.random.SeedSequence. entropy: a non-negative integer of any size (a Number that is a safe
      integer, a BigInt, or a string of decimal digits or "0x" hex digits), or an array of those
      (each element is split into 32-bit words, as numpy does); null/undefined draws 128 fresh bits.
      spawnKey: array of non-negative integers (Number or BigInt).
      .entropy, .spawnKey, .poolSize, .pool (Uint32Array), .nChildrenSpawned
      .spawn(n)                        n children, spawn keys spawnKey + [i] for
                                       i = nChildrenSpawned .. nChildrenSpawned + n - 1; then
                                       nChildrenSpawned += n (a second call continues the numbering)
      .generateState(nWords, dtype)    dtype "uint32" (default): a Uint32Array of nWords words;
                                       "uint64": an Array of nWords BigInts (two 32-bit words each,
                                       little-endian), as numpy's generate_state

  new PCG64(seed)
      numpy.random.PCG64 (128-bit LCG, XSL-RR output). seed: a SeedSequence, or anything
      SeedSequence accepts (as numpy does). The hot path uses no BigInt: the 128-bit state is kept in
      six 24-bit limbs and multiplied exactly in double arithmetic (measured under node 20: some
      25-40 million random() calls and 50-55 million values through fill() per second).
      .nextUint64Parts(out?)   next raw output as [hi, lo] (two uint32 Numbers); written into `out`
                               (any array of length >= 2) when given, else a new array
      .next()                  next raw output, left in .hi and .lo (uint32 Numbers); no allocation
      .random()                next float64 in [0, 1), as Generator.random()
      .openUniform()           next float64 in (0, 1): ((raw >> 12) + 0.5) * 2**-52
      .fill(n, kind = "random", out = new Float64Array(n), offset = 0)
                               n values of kind "random" or "open" written to out[offset ..]; returns out
      .fillParts(n, out = new Uint32Array(2 * n), offset = 0)
                               n raw outputs as hi, lo pairs: out[offset + 2i] = hi, out[offset + 2i + 1] = lo
      .rawBigInt()             next raw output as a BigInt (for tests; slow)
      .getState()              {state, inc} as BigInts, as numpy's bit_generator.state["state"]
      .seedSequence            the SeedSequence it was seeded from

  runStreams(seed, count = 6)
      An Array of the `count` PCG64 generators of new SeedSequence(seed).spawn(count), with two extra
      properties: .root (that SeedSequence) and .spawn(n), which spawns n more children from the same
      root (continuing its numbering, as root.spawn(n) in Python) and returns their generators.

  spawnGenerators(seedSequence, n)
      seedSequence.spawn(n) made into PCG64 generators.

  permutationPrefix(uniforms, P, B, offset = 0, out = new Int32Array(min(B, P)))
      The first min(B, P) indices (0 .. P-1) of a stable argsort of uniforms[offset .. offset+P-1]:
      indices in increasing order of value, ties by index. Returns out.

  permutationPrefixes(rng, n, P, B)
      rng.random((n, P)).argsort(axis=-1, kind="stable")[:, :B] as a flat Int32Array, row-major
      (n rows of min(B, P) indices); draws n * P values from rng.
*/
const toyrlRandom = (function () {
  // ---------------------------------------------------------------- SeedSequence --------------------
  const DEFAULT_POOL_SIZE = 4;
  const INIT_A = 0x43b0d7e5;
  const MULT_A = 0x931e8875;
  const INIT_B = 0x8b51f9dd;
  const MULT_B = 0x58f38ded;
  const MIX_MULT_L = 0xca01f9dd;
  const MIX_MULT_R = 0x4973f715;
  const XSHIFT = 16;

  function toBigIntNonNegative(x) {
    let v;
    if (typeof x === "bigint") v = x;
    else if (typeof x === "number") {
      if (!Number.isInteger(x)) throw new TypeError(`seed must be an integer (got ${x})`);
      if (!Number.isSafeInteger(x)) throw new RangeError(`seed ${x} is not a safe integer: pass it as a BigInt or a string`);
      v = BigInt(x);
    } else if (typeof x === "string") {
      if (/^0x[0-9a-fA-F]+$/.test(x)) v = BigInt(x);
      else if (/^[0-9]+$/.test(x)) v = BigInt(x);
      else throw new RangeError(`unrecognized seed string ${JSON.stringify(x)}`);
    } else throw new TypeError(`seed must be a non-negative integer (got ${typeof x})`);
    if (v < 0n) throw new RangeError("expected non-negative integer");
    return v;
  }

  // numpy's _int_to_uint32_array: 32-bit words, lowest first; 0 is one word [0].
  function intToWords(x, words) {
    let v = toBigIntNonNegative(x);
    if (v === 0n) { words.push(0); return; }
    while (v > 0n) { words.push(Number(v & 0xffffffffn)); v >>= 32n; }
  }

  // numpy's _coerce_to_uint32_array for an integer or a flat sequence of integers.
  function coerceToWords(x) {
    const words = [];
    if (Array.isArray(x) || ArrayBuffer.isView(x)) {
      for (const v of x) {
        if (Array.isArray(v) || ArrayBuffer.isView(v)) throw new TypeError("SeedSequence does not accept nested sequences");
        intToWords(v, words);
      }
    } else intToWords(x, words);
    return words;
  }

  function hashmix(value, hc) { // hc: [hash_const], updated in place
    value = (value ^ hc[0]) >>> 0;
    hc[0] = Math.imul(hc[0], MULT_A) >>> 0;
    value = Math.imul(value, hc[0]) >>> 0;
    return (value ^ (value >>> XSHIFT)) >>> 0;
  }

  function mix(x, y) {
    const result = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
    return (result ^ (result >>> XSHIFT)) >>> 0;
  }

  function freshEntropy(poolSize) {
    const words = new Uint32Array(poolSize);
    const c = typeof globalThis !== "undefined" ? globalThis.crypto : undefined;
    if (c && typeof c.getRandomValues === "function") c.getRandomValues(words);
    else for (let i = 0; i < poolSize; i++) words[i] = Math.floor(Math.random() * 4294967296);
    let v = 0n;
    for (let i = poolSize - 1; i >= 0; i--) v = (v << 32n) | BigInt(words[i]);
    return v;
  }

  class SeedSequence {
    constructor(entropy, spawnKey = [], poolSize = DEFAULT_POOL_SIZE, nChildrenSpawned = 0) {
      if (!(Number.isInteger(poolSize) && poolSize >= DEFAULT_POOL_SIZE)) {
        throw new RangeError(`The size of the entropy pool should be at least ${DEFAULT_POOL_SIZE}`);
      }
      if (entropy === undefined || entropy === null) entropy = freshEntropy(poolSize);
      this.entropy = entropy;
      this.spawnKey = Array.from(spawnKey);
      this.poolSize = poolSize;
      this.nChildrenSpawned = nChildrenSpawned;
      this.pool = new Uint32Array(poolSize);
      this._mixEntropy(this._assembledEntropy());
    }

    _assembledEntropy() {
      const run = coerceToWords(this.entropy);
      const spawn = coerceToWords(this.spawnKey);
      if (spawn.length > 0) while (run.length < this.poolSize) run.push(0);
      return run.concat(spawn);
    }

    _mixEntropy(entropy) {
      const mixer = this.pool, n = mixer.length, hc = [INIT_A];
      for (let i = 0; i < n; i++) mixer[i] = hashmix(i < entropy.length ? entropy[i] : 0, hc);
      for (let src = 0; src < n; src++) {
        for (let dst = 0; dst < n; dst++) {
          if (src !== dst) mixer[dst] = mix(mixer[dst], hashmix(mixer[src], hc));
        }
      }
      for (let src = n; src < entropy.length; src++) {
        for (let dst = 0; dst < n; dst++) mixer[dst] = mix(mixer[dst], hashmix(entropy[src], hc));
      }
    }

    generateState(nWords, dtype = "uint32") {
      if (!(Number.isInteger(nWords) && nWords >= 0)) throw new RangeError("nWords must be a non-negative integer");
      let n32;
      if (dtype === "uint32") n32 = nWords;
      else if (dtype === "uint64") n32 = 2 * nWords;
      else throw new RangeError("only support uint32 or uint64");
      const state = new Uint32Array(n32), pool = this.pool;
      let hashConst = INIT_B;
      for (let i = 0; i < n32; i++) {
        let v = (pool[i % pool.length] ^ hashConst) >>> 0;
        hashConst = Math.imul(hashConst, MULT_B) >>> 0;
        v = Math.imul(v, hashConst) >>> 0;
        state[i] = (v ^ (v >>> XSHIFT)) >>> 0;
      }
      if (dtype === "uint32") return state;
      const out = new Array(nWords);
      for (let i = 0; i < nWords; i++) out[i] = (BigInt(state[2 * i + 1]) << 32n) | BigInt(state[2 * i]);
      return out;
    }

    spawn(n) {
      if (!(Number.isInteger(n) && n >= 0)) throw new RangeError("n_children must be non-negative");
      const seqs = [];
      for (let i = this.nChildrenSpawned; i < this.nChildrenSpawned + n; i++) {
        seqs.push(new SeedSequence(this.entropy, this.spawnKey.concat([i]), this.poolSize));
      }
      this.nChildrenSpawned += n;
      return seqs;
    }
  }

  // ---------------------------------------------------------------- PCG64 ---------------------------
  // The 128-bit state x = sum a_k 2^(24k), k = 0..5 (a_5 holds the top 8 bits). One step is
  // x <- x * M + inc (mod 2^128), column by column: a column is at most six products of 24-bit
  // limbs (< 6 * 2^48) plus a carry, well below 2^53, so every double operation is exact.
  const MASK128 = (1n << 128n) - 1n;
  const MULT = (2549297995355413924n << 64n) | 4865540595714422341n; // PCG_DEFAULT_MULTIPLIER_128
  const TWO24 = 16777216, INV24 = 1 / 16777216;
  const TWO_M32 = 2 ** -32, TWO_M52 = 2 ** -52, TWO_M53 = 2 ** -53;

  function limbs(v) {
    const out = [];
    for (let k = 0; k < 6; k++) { out.push(Number(v & 0xffffffn)); v >>= 24n; }
    return out;
  }
  const [M0, M1, M2, M3, M4, M5] = limbs(MULT);

  class PCG64 {
    constructor(seed) {
      const seq = seed instanceof SeedSequence ? seed : new SeedSequence(seed);
      this.seedSequence = seq;
      const v = seq.generateState(4, "uint64");
      const initstate = (v[0] << 64n) | v[1];
      const initseq = (v[2] << 64n) | v[3];
      const inc = ((initseq << 1n) | 1n) & MASK128;
      // state = 0; step (state = inc); state += initstate; step.
      const state = (((inc + initstate) & MASK128) * MULT + inc) & MASK128;
      [this.c0, this.c1, this.c2, this.c3, this.c4, this.c5] = limbs(inc);
      [this.a0, this.a1, this.a2, this.a3, this.a4, this.a5] = limbs(state);
      this.hi = 0;
      this.lo = 0;
    }

    getState() {
      const f = (x) => x.reduceRight((acc, limb) => (acc << 24n) | BigInt(limb), 0n);
      return {
        state: f([this.a0, this.a1, this.a2, this.a3, this.a4, this.a5]),
        inc: f([this.c0, this.c1, this.c2, this.c3, this.c4, this.c5]),
      };
    }

    // One step: the raw output left in this.hi / this.lo (uint32), no allocation.
    next() {
      generate(this, 1, RAW, SCRATCH, 0);
      this.hi = SCRATCH[0];
      this.lo = SCRATCH[1];
    }

    nextUint64Parts(out) {
      generate(this, 1, RAW, SCRATCH, 0);
      if (out === undefined) out = [0, 0];
      out[0] = SCRATCH[0];
      out[1] = SCRATCH[1];
      return out;
    }

    random() {
      generate(this, 1, RANDOM, SCRATCH_F, 0);
      return SCRATCH_F[0];
    }

    openUniform() {
      generate(this, 1, OPEN, SCRATCH_F, 0);
      return SCRATCH_F[0];
    }

    rawBigInt() {
      generate(this, 1, RAW, SCRATCH, 0);
      return (BigInt(SCRATCH[0]) << 32n) | BigInt(SCRATCH[1]);
    }

    fill(n, kind = "random", out, offset = 0) {
      let mode;
      if (kind === "random") mode = RANDOM;
      else if (kind === "open") mode = OPEN;
      else throw new RangeError(`fill: kind must be "random" or "open" (got ${kind})`);
      if (out === undefined) out = new Float64Array(n);
      generate(this, n, mode, out, offset);
      return out;
    }

    // n raw outputs as (hi, lo) uint32 pairs into out[offset ..] (a Uint32Array of 2n words).
    fillParts(n, out = new Uint32Array(2 * n), offset = 0) {
      generate(this, n, RAW, out, offset);
      return out;
    }
  }

  const RANDOM = 0, OPEN = 1, RAW = 2;
  const SCRATCH = new Uint32Array(2), SCRATCH_F = new Float64Array(1);

  /* The one implementation of a step: n steps of g, each output written to out as
     RANDOM: out[offset + i] = (raw >> 11) * 2^-53; OPEN: ((raw >> 12) + 0.5) * 2^-52;
     RAW: out[offset + 2i] = high 32 bits, out[offset + 2i + 1] = low 32 bits. */
  function generate(g, n, mode, out, offset) {
    let a0 = g.a0, a1 = g.a1, a2 = g.a2, a3 = g.a3, a4 = g.a4, a5 = g.a5;
    const c0 = g.c0, c1 = g.c1, c2 = g.c2, c3 = g.c3, c4 = g.c4, c5 = g.c5;
    for (let i = 0; i < n; i++) {
      // x * M + inc, column by column; q is the carry (Math.floor of a non-negative exact value).
      let col = a0 * M0 + c0;
      let q = Math.floor(col * INV24);
      const b0 = (col - q * TWO24) | 0;
      col = q + a0 * M1 + a1 * M0 + c1;
      q = Math.floor(col * INV24);
      const b1 = (col - q * TWO24) | 0;
      col = q + a0 * M2 + a1 * M1 + a2 * M0 + c2;
      q = Math.floor(col * INV24);
      const b2 = (col - q * TWO24) | 0;
      col = q + a0 * M3 + a1 * M2 + a2 * M1 + a3 * M0 + c3;
      q = Math.floor(col * INV24);
      const b3 = (col - q * TWO24) | 0;
      col = q + a0 * M4 + a1 * M3 + a2 * M2 + a3 * M1 + a4 * M0 + c4;
      q = Math.floor(col * INV24);
      const b4 = (col - q * TWO24) | 0;
      // The top limb only keeps 8 bits: wrapping 32-bit arithmetic is exact for it (q < 2^28).
      let t = ((q | 0) + c5) | 0;
      t = (t + Math.imul(a0, M5)) | 0;
      t = (t + Math.imul(a1, M4)) | 0;
      t = (t + Math.imul(a2, M3)) | 0;
      t = (t + Math.imul(a3, M2)) | 0;
      t = (t + Math.imul(a4, M1)) | 0;
      t = (t + Math.imul(a5, M0)) | 0;
      const b5 = t & 0xff;
      a0 = b0; a1 = b1; a2 = b2; a3 = b3; a4 = b4; a5 = b5;
      // 32-bit words of the state: w0 bits 0-31, w1 32-63, w2 64-95, w3 96-127; then XSL-RR:
      // (high 64 ^ low 64) rotated right by the top 6 bits of the state.
      const w0 = b0 | (b1 << 24), w1 = (b1 >>> 8) | (b2 << 16);
      const w2 = (b2 >>> 16) | (b3 << 8), w3 = b4 | (b5 << 24);
      let h = w3 ^ w1, l = w2 ^ w0;
      const rot = b5 >>> 2;
      const swap = (h ^ l) & ((rot << 26) >> 31); // a rotation by 32 or more first swaps the halves
      h ^= swap;
      l ^= swap;
      const r = rot & 31; // x << 1 << (31 - r) is x << (32 - r), and 0 for r = 0
      const hi = ((h >>> r) | (l << 1 << (31 - r))) >>> 0;
      const lo = ((l >>> r) | (h << 1 << (31 - r))) >>> 0;
      if (mode === RANDOM) out[offset + i] = hi * TWO_M32 + (lo >>> 11) * TWO_M53;
      else if (mode === OPEN) out[offset + i] = hi * TWO_M32 + ((lo >>> 12) + 0.5) * TWO_M52;
      else { out[offset + 2 * i] = hi; out[offset + 2 * i + 1] = lo; }
    }
    g.a0 = a0; g.a1 = a1; g.a2 = a2; g.a3 = a3; g.a4 = a4; g.a5 = a5;
  }

  // ---------------------------------------------------------------- runs ----------------------------
  function spawnGenerators(seedSequence, n) {
    return seedSequence.spawn(n).map((child) => new PCG64(child));
  }

  function runStreams(seed, count = 6) {
    const root = seed instanceof SeedSequence ? seed : new SeedSequence(seed);
    const gens = spawnGenerators(root, count);
    gens.root = root;
    gens.spawn = (n) => spawnGenerators(root, n);
    return gens;
  }

  // ---------------------------------------------------------------- permutations --------------------
  function permutationPrefix(uniforms, P, B, offset = 0, out) {
    const m = Math.max(0, Math.min(B, P));
    if (out === undefined) out = new Int32Array(m);
    if (m === 0) return out;
    if (m <= 64) {
      // Keep the m smallest so far, sorted; a later index never goes before an equal value.
      let count = 0;
      for (let i = 0; i < P; i++) {
        const u = uniforms[offset + i];
        if (count === m) {
          if (!(u < uniforms[offset + out[m - 1]])) continue;
          count--;
        }
        let k = count;
        while (k > 0 && uniforms[offset + out[k - 1]] > u) { out[k] = out[k - 1]; k--; }
        out[k] = i;
        count++;
      }
      return out;
    }
    const idx = new Int32Array(P);
    for (let i = 0; i < P; i++) idx[i] = i;
    idx.sort((x, y) => (uniforms[offset + x] - uniforms[offset + y]) || (x - y));
    for (let k = 0; k < m; k++) out[k] = idx[k];
    return out;
  }

  function permutationPrefixes(rng, n, P, B) {
    const m = Math.max(0, Math.min(B, P));
    const u = rng.fill(n * P, "random");
    const out = new Int32Array(n * m);
    for (let r = 0; r < n; r++) permutationPrefix(u, P, B, r * P, out.subarray(r * m, (r + 1) * m));
    return out;
  }

  return { SeedSequence, PCG64, runStreams, spawnGenerators, permutationPrefix, permutationPrefixes };
})();
if (typeof module !== "undefined") module.exports = toyrlRandom;
