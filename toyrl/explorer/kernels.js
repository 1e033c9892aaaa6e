/*
 * toyrl's portable transcendental kernels, operation for operation the same as toyrl/kernels.py.
 *
 * Only IEEE-754 basic operations (+ - * / and Math.sqrt, each correctly rounded), Math.floor, Math.abs,
 * comparisons and exact scaling by powers of two are used, in the same order as the Python kernels, and
 * JavaScript engines never fuse a multiply and an add: every result is bit-identical to numpy's.
 * frexp reads the exponent field through a Float64Array/Uint32Array view; powers of two come from an
 * exactly built table. Nothing here calls Math.exp, Math.log, Math.pow or any other library function.
 *
 * Algorithms (see the Python module for the analysis): fdlibm's e_exp.c, s_expm1.c, e_log.c and
 * s_log1p.c; power as in fdlibm's e_pow.c (double-double logarithm, exp of the double-double product);
 * softplus and expit from a double-double exp; normalQuantile is Wichura's AS241.
 *
 * Usable as a plain script (defines the global toyrlKernels) and as a CommonJS module.
 */
"use strict";

const toyrlKernels = (function () {
  const INVLN2 = 1.4426950408889634;
  const LN2_HI = 0.6931471803691238;
  const LN2_LO = 1.9082149292705877e-10;
  const P1 = 0.16666666666666602;
  const P2 = -0.0027777777777015593;
  const P3 = 6.613756321437934e-05;
  const P4 = -1.6533902205465252e-06;
  const P5 = 4.1381367970572385e-08;
  const Q1 = -0.03333333333333313;
  const Q2 = 0.0015873015872548146;
  const Q3 = -7.93650757867488e-05;
  const Q4 = 4.008217827329362e-06;
  const Q5 = -2.0109921818362437e-07;
  const LG1 = 0.6666666666666735;
  const LG2 = 0.3999999999940942;
  const LG3 = 0.2857142874366239;
  const LG4 = 0.22222198432149784;
  const LG5 = 0.1818357216161805;
  const LG6 = 0.15313837699209373;
  const LG7 = 0.14798198605116586;
  const LOG1P_MID_NEG = -0.292893648147583;
  const LOG1P_MID_POS = 0.4142136573791504;
  const SQRT_HALF = 0.7071067811865476;
  const TINY = 5.551115123125783e-17;
  const TWO_M1000 = 9.332636185032189e-302;
  const SPLIT = 134217729.0;
  const EXP_MIN = -746.0;
  const EXP_MAX = 710.0;
  const EXPM1_MIN = -40.0;
  const SOFTPLUS_LINEAR = 37.0;
  const POW_Y_MAX = 1.8446744073709552e+19;
  const AS241_A = [2509.0809287301227, 33430.57558358813, 67265.7709270087, 45921.95393154987, 13731.69376550946, 1971.5909503065513, 133.14166789178438, 3.3871328727963665];
  const AS241_B = [5226.495278852854, 28729.085735721943, 39307.89580009271, 21213.794301586597, 5394.196021424751, 687.1870074920579, 42.31333070160091, 1.0];
  const AS241_C = [0.0007745450142783414, 0.022723844989269184, 0.2417807251774506, 1.2704582524523684, 3.6478483247632045, 5.769497221460691, 4.630337846156546, 1.4234371107496835];
  const AS241_D = [1.0507500716444169e-09, 0.0005475938084995345, 0.015198666563616457, 0.14810397642748008, 0.6897673349851, 1.6763848301838038, 2.053191626637759, 1.0];
  const AS241_E = [2.0103343992922881e-07, 2.7115555687434876e-05, 0.0012426609473880784, 0.026532189526576124, 0.29656057182850487, 1.7848265399172913, 5.463784911164114, 6.657904643501103];
  const AS241_F = [2.0442631033899397e-15, 1.421511758316446e-07, 1.8463183175100548e-05, 0.0007868691311456133, 0.014875361290850615, 0.1369298809227358, 0.599832206555888, 1.0];
  const ONE_THIRD = 1.0 / 3.0;
  const ONE_SEVENTH = 1.0 / 7.0;
  const ONE_NINTH = 1.0 / 9.0;
  const LOGC_FIRST = 91;
  const LOGC_HI = new Float64Array([
    -0.34117075740276714, -0.33024168687057687, -0.3194307707663612, -0.3087354816496133,
    -0.29815337231907635, -0.2876820724517809, -0.27731928541623435, -0.26706278524904525,
    -0.2569104137850272, -0.24686007793152578, -0.2369097470783577, -0.22705745063534608,
    -0.2173012756899814, -0.2076393647782445, -0.1980699137620938, -0.18859116980755003, -0.179201429457711,
    -0.16989903679539747, -0.16068238169047347, -0.15154989812720093, -0.14250006260728304,
    -0.13353139262452263, -0.1246424452072766, -0.1158318155251217, -0.1070981355563671,
    -0.09844007281325252, -0.08985632912186105, -0.0813456394539524, -0.07290677080808779,
    -0.06453852113757118, -0.05623971832287608, -0.048009219186360606, -0.039845908547199674,
    -0.0317486983145803, -0.023716526617316044, -0.015748356968139168, -0.007843177461025893, 0.0,
    0.007782140442054949, 0.015504186535965254, 0.02316705928153438, 0.030771658666753687,
    0.0383188643021366, 0.0458095360312942, 0.053244514518812285, 0.06062462181643484, 0.06795066190850775,
    0.07522342123758753, 0.08244366921107459, 0.08961215868968714, 0.09672962645855111, 0.10379679368164356,
    0.11081436634029011, 0.11778303565638346, 0.12470347850095724, 0.13157635778871926, 0.13840232285911913,
    0.1451820098444979, 0.15191604202584197, 0.15860503017663857, 0.16524957289530717, 0.17185025692665923,
    0.1784076574728183, 0.184922338494012, 0.19139485299962947, 0.19782574332991987, 0.2042155414286909,
    0.21056476910734964, 0.21687393830061436, 0.22314355131420976, 0.22937410106484582, 0.2355660713127669,
    0.24171993688714516, 0.24783616390458127, 0.25391520998096345, 0.25995752443692605, 0.26596354849713794,
    0.27193371548364176, 0.2778684510034563, 0.2837681731306446, 0.28963329258304266, 0.2954642128938359,
    0.3012613305781618, 0.3070250352949119, 0.3127557100038969, 0.3184537311185346, 0.324119468654212,
    0.329753286372468, 0.3353555419211378, 0.3409265869705932, 0.34646676734620857
  ]);
  const LOGC_LO = new Float64Array([
    1.9366790062602867e-17, 1.0828321637483858e-17, -1.354256857264811e-18, 1.6199186085148102e-17,
    1.720695867445866e-17, -2.607160616442564e-17, 7.44528405583513e-18, 7.32891532732017e-18,
    -2.502843296152504e-17, -1.361743371748368e-17, -1.9682402978398164e-18, -9.551415762738488e-18,
    -1.6168452453763015e-18, -1.2053243216686129e-17, -3.742843482461439e-18, 7.432164219196925e-18,
    1.0785017454858423e-17, 4.868008764439071e-19, 3.650183553047837e-18, -5.1669593684615594e-18,
    9.926388234225749e-18, 3.664457663660085e-18, 5.808912678940971e-18, -4.338484369808096e-18,
    1.73705104015906e-18, 4.439009633675136e-18, 6.273760163689594e-19, -5.07707635593117e-18,
    6.306860257532778e-18, 6.470486661692933e-18, 3.2835149805605613e-18, -1.4390903347292205e-18,
    3.129547680315208e-18, -3.0382263084680858e-18, 1.5774243488668215e-18, -1.0021578630528974e-18,
    -2.764708154124904e-19, 0.0, -1.2819179123343845e-20, -3.278321022892429e-19, -1.1769544932063305e-18,
    1.0431732029005968e-18, -2.357996157351286e-18, 1.902959866474257e-18, -1.665575816973663e-18,
    2.6424025938726934e-18, -1.2802141240611733e-18, -5.930604196293241e-18, 5.700437773813987e-18,
    -5.4268129336647135e-18, -5.597397486289965e-19, 5.47772415726659e-18, 1.183748342825649e-18,
    -1.1971685747593677e-18, -4.6522609636496624e-18, 1.1123000879729588e-17, 4.447777301357527e-18,
    8.242418783022475e-18, 6.4838631244022194e-18, 1.1257003872182592e-17, -1.0094935622322628e-17,
    -6.0224538210113705e-18, -1.2432553788701131e-17, 3.0236614153574064e-18, -1.2129496905792884e-17,
    1.2821194372980142e-17, 2.7338281018722773e-18, -4.249405314729895e-18, 4.551026193234283e-18,
    -9.091270597324799e-18, 9.927671823978025e-18, -2.3943371495187355e-18, 8.900990022166643e-18,
    -1.2432209578702523e-17, -8.048097394424201e-18, 2.069806938978935e-17, 5.3393802761314314e-18,
    7.83319637697442e-19, -9.16018294909263e-19, -2.032665581126656e-17, 2.0535953219858174e-17,
    -2.16461086040599e-17, -9.048511144048564e-18, -1.2319916200101964e-17, -1.451808353098951e-17,
    2.7114779367326236e-17, -7.958214381893813e-18, 2.122020616196946e-18, 1.834564437059473e-17,
    1.7467136443544747e-17, 1.028583585496265e-17
  ]);
  // POW2[k + 1074] = 2^k for k in [-1074, 1023], built by exact doublings and halvings.
  const POW2_BIAS = 1074;
  const POW2 = new Float64Array(2098);
  POW2[POW2_BIAS] = 1.0;
  for (let i = 1; i <= 1023; i++) POW2[POW2_BIAS + i] = POW2[POW2_BIAS + i - 1] * 2.0;
  for (let i = 1; i <= 1074; i++) POW2[POW2_BIAS - i] = POW2[POW2_BIAS - i + 1] * 0.5;
  const TWO_54 = POW2[POW2_BIAS + 54];

  // Word access to a double, whatever the byte order of the platform.
  const F64 = new Float64Array(1);
  const U32 = new Uint32Array(F64.buffer);
  F64[0] = 1.0;
  const HI = U32[1] === 0x3ff00000 ? 1 : 0;

  // frexp for finite x > 0: returns the mantissa in [0.5, 1) and leaves the exponent in frexpE.
  let frexpE = 0;
  function frexp(x) {
    F64[0] = x;
    let hw = U32[HI];
    let e = (hw >>> 20) & 0x7ff;
    let adjust = 0;
    if (e === 0) {
      // subnormal: scale into the normal range first (exact)
      F64[0] = x * TWO_54;
      hw = U32[HI];
      e = (hw >>> 20) & 0x7ff;
      adjust = 54;
    }
    U32[HI] = (hw & 0x800fffff) | 0x3fe00000;
    frexpE = e - 1022 - adjust;
    return F64[0];
  }

  // y * 2^k for y in [0.5, 2], k integer in [-1100, 1024]: exact when normal, else rounded once.
  function scale(y, k) {
    if (k < -1020) return y * POW2[POW2_BIAS + k + 1000] * TWO_M1000;
    if (k > 1023) return y * POW2[POW2_BIAS + 1023] * POW2[POW2_BIAS + k - 1023];
    return y * POW2[POW2_BIAS + k];
  }

  // y * 2^k for low parts (2^-480 <= |y| <= 2^480 or 0): the first factor is exact, the second rounds.
  function scaleSplit(y, k) {
    const ka = k >> 1;
    return y * POW2[POW2_BIAS + ka] * POW2[POW2_BIAS + k - ka];
  }

  // Dekker's exact product: a*b = tpP + tpE.
  let tpP = 0.0;
  let tpE = 0.0;
  function twoProd(a, b) {
    const ca = SPLIT * a;
    const ah = ca - (ca - a);
    const al = a - ah;
    const cb = SPLIT * b;
    const bh = cb - (cb - b);
    const bl = b - bh;
    const p = a * b;
    tpP = p;
    tpE = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
  }

  // Knuth's TwoSum: a + b = tsS + tsE.
  let tsS = 0.0;
  let tsE = 0.0;
  function twoSum(a, b) {
    const s = a + b;
    const bb = s - a;
    tsS = s;
    tsE = (a - (s - bb)) + (b - bb);
  }

  // fdlibm's c = r - (P1 r^2 + ... + P5 r^10).
  function expC(r) {
    const t = r * r;
    return r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
  }

  // e^(hi - lo) = ddH + ddL (see the Python _exp_sum).
  let ddH = 0.0;
  let ddL = 0.0;
  function expSum(hi, lo) {
    const r = hi - lo;
    const rl = (hi - r) - lo;
    const c = expC(r);
    const q = (r * c) / (2.0 - c);
    const s = 1.0 + r;
    const sErr = (1.0 - s) + r;
    const tail = q + (sErr + (rl + r * rl));
    const eh = s + tail;
    ddH = eh;
    ddL = (s - eh) + tail;
  }

  // e^x = (ddH + ddL) * 2^ddK for x in [-746, 710].
  let ddK = 0;
  function expDD(x) {
    const k = Math.floor(x * INVLN2 + 0.5);
    expSum(x - k * LN2_HI, k * LN2_LO);
    ddK = k;
  }

  function exp(x) {
    if (x !== x) return NaN;
    const xc = x < EXP_MIN ? EXP_MIN : x > EXP_MAX ? EXP_MAX : x;
    expDD(xc);
    return scale(ddH, ddK);
  }

  function expm1(x) {
    if (x !== x) return NaN;
    if (Math.abs(x) < TINY) return x;
    const xc = x < EXPM1_MIN ? EXPM1_MIN : x > EXP_MAX ? EXP_MAX : x;
    const k = Math.floor(xc * INVLN2 + 0.5);
    const hi = xc - k * LN2_HI;
    const lo = k * LN2_LO;
    const r = hi - lo;
    const c = (hi - r) - lo;
    const hfx = 0.5 * r;
    const hxs = r * hfx;
    const r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
    const t = 3.0 - r1 * hfx;
    let e = hxs * ((r1 - t) / (6.0 - r * t));
    e = (r * (e - c) - c) - hxs;
    if (k <= 19) {
      if (k === 1 && r < -0.25) return ((r + 0.5) - e) * 2.0;
      const u = POW2[POW2_BIAS + k];
      return (r - e) * u + (u - 1.0);
    }
    if (k <= 56) {
      const u = POW2[POW2_BIAS + k];
      return ((r - (e + POW2[POW2_BIAS - k])) + 1.0) * u;
    }
    return scale(1.0 - (e - r), k) - 1.0;
  }

  function log(x) {
    if (!(x > 0.0 && x < Infinity)) return x === 0.0 ? -Infinity : x === Infinity ? Infinity : NaN;
    let m = frexp(x);
    let k = frexpE;
    if (m < SQRT_HALF) {
      m = m + m;
      k = k - 1;
    }
    const f = m - 1.0;
    const hfsq = (0.5 * f) * f;
    const s = f / (2.0 + f);
    const z = s * s;
    const R = z * (LG1 + z * (LG2 + z * (LG3 + z * (LG4 + z * (LG5 + z * (LG6 + z * LG7))))));
    return k * LN2_HI - ((hfsq - (s * (hfsq + R) + k * LN2_LO)) - f);
  }

  // log(1 + x + xl) for finite x > -1 (xl used only when hasLow).
  function log1pCore(x, xl, hasLow) {
    const u = 1.0 + x;
    let m = frexp(u);
    let k = frexpE;
    if (m < SQRT_HALF) {
      m = m + m;
      k = k - 1;
    }
    let f;
    let c;
    if (x > LOG1P_MID_NEG && x < LOG1P_MID_POS) {
      f = x;
      k = 0;
      c = hasLow ? xl / u : 0.0;
    } else {
      const cRound = u >= 2.0 ? 1.0 - (u - x) : x - (u - 1.0);
      c = hasLow ? (cRound + xl) / u : cRound / u;
      f = m - 1.0;
    }
    const hfsq = (0.5 * f) * f;
    const s = f / (2.0 + f);
    const z = s * s;
    const R = z * (LG1 + z * (LG2 + z * (LG3 + z * (LG4 + z * (LG5 + z * (LG6 + z * LG7))))));
    return k * LN2_HI - ((hfsq - (s * (hfsq + R) + (k * LN2_LO + c))) - f);
  }

  function log1p(x) {
    if (!(x > -1.0 && x < Infinity)) return x === -1.0 ? -Infinity : x === Infinity ? Infinity : NaN;
    if (Math.abs(x) < TINY) return x;
    return log1pCore(x, 0.0, false);
  }

  // softplus without the nan check.
  function softplusRaw(x) {
    if (x > SOFTPLUS_LINEAR) return x;
    expDD(x < EXP_MIN ? EXP_MIN : x);
    const th = scale(ddH, ddK);
    if (th < TINY) return th;
    return log1pCore(th, scaleSplit(ddL, ddK), true);
  }

  function softplus(x) {
    if (x !== x) return NaN;
    return softplusRaw(x);
  }

  function logExpit(x) {
    if (x !== x) return NaN;
    return -softplusRaw(-x);
  }

  function expit(x) {
    if (x !== x) return NaN;
    const neg = x < 0.0;
    const a = -Math.abs(x);
    expDD(a < EXP_MIN ? EXP_MIN : a);
    const eh = ddH;
    const el = ddL;
    const k = ddK;
    const th = scale(eh, k);
    const tl = scaleSplit(el, k);
    const dh = 1.0 + th;
    const dl = ((1.0 - dh) + th) + tl;
    const nh = neg ? eh : 1.0;
    const nl = neg ? el : 0.0;
    const q = nh / dh;
    twoProd(q, dh);
    const res = q + ((((nh - tpP) - tpE) + nl) - q * dl) / dh;
    return neg ? scale(res, k) : res;
  }

  // log(x) = ldH + ldL for finite x > 0 (table-driven double-double; see the Python _log_dd).
  let ldH = 0.0;
  let ldL = 0.0;
  function logDD(x) {
    let m = frexp(x);
    let k = frexpE;
    if (m < SQRT_HALF) {
      m = m + m;
      k = k - 1;
    }
    const fi = Math.floor(m * 128.0 + 0.5);
    const c = fi * 0.0078125;
    const idx = fi - LOGC_FIRST;
    const f = m - c;
    const c2 = c + c;
    const dh = c2 + f;
    const dl = f - (dh - c2);
    const sh = f / dh;
    twoProd(sh, dh);
    const sl = (((f - tpP) - tpE) - sh * dl) / dh;
    const z = sh * sh;
    const uh = sh + sh;
    const tail = (uh * z) * (ONE_THIRD + z * (0.2 + z * (ONE_SEVENTH + z * ONE_NINTH)));
    twoSum(k * LN2_HI, LOGC_HI[idx]);
    const s1 = tsS;
    const e1 = tsE;
    twoSum(s1, uh);
    const s2 = tsS;
    const e2 = tsE;
    const lo = ((((e1 + e2) + k * LN2_LO) + LOGC_LO[idx]) + (sl + sl)) + tail;
    const lh = s2 + lo;
    ldH = lh;
    ldL = (s2 - lh) + lo;
  }

  function power(x, y) {
    if (y === 0.0 || x === 1.0) return 1.0;
    if (x !== x || y !== y || x < 0.0) return NaN;
    if (y === 1.0) return x;
    if (x === 0.0) {
      const zero = y > 0.0 ? 0.0 : Infinity;
      return 1.0 / x < 0.0 && y - 2.0 * Math.floor(0.5 * y) === 1.0 ? -zero : zero; // -0, odd y: C99
    }
    if (x === Infinity) return y > 0.0 ? Infinity : 0.0;
    logDD(x);
    const yc = y < -POW_Y_MAX ? -POW_Y_MAX : y > POW_Y_MAX ? POW_Y_MAX : y;
    twoProd(yc, ldH);
    const ph = tpP;
    const pl = tpE + yc * ldL;
    const zh = ph + pl;
    const zl = (ph - zh) + pl;
    const zc = zh < EXP_MIN ? EXP_MIN : zh > EXP_MAX ? EXP_MAX : zh;
    const k = Math.floor(zc * INVLN2 + 0.5);
    const hi = zc - k * LN2_HI;
    expSum(hi, k * LN2_LO - zl);
    return scale(ddH, k);
  }

  // ((c0 r + c1) r + c2) ... for the 8 coefficients of an AS241 polynomial, highest degree first.
  function horner(c, r) {
    return ((((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) * r + c[6]) * r + c[7];
  }

  function normalQuantile(p) {
    if (!(p > 0.0 && p < 1.0)) return p === 0.0 ? -Infinity : p === 1.0 ? Infinity : NaN;
    const q = p - 0.5;
    if (Math.abs(q) <= 0.425) {
      const r = 0.180625 - q * q;
      return (horner(AS241_A, r) * q) / horner(AS241_B, r);
    }
    const r = Math.sqrt(-log(q <= 0.0 ? p : 1.0 - p));
    let x;
    if (r <= 5.0) {
      const rn = r - 1.6;
      x = horner(AS241_C, rn) / horner(AS241_D, rn);
    } else {
      const rf = r - 5.0;
      x = horner(AS241_E, rf) / horner(AS241_F, rf);
    }
    return q < 0.0 ? -x : x;
  }

  return {
    exp: exp,
    expm1: expm1,
    log: log,
    log1p: log1p,
    softplus: softplus,
    logExpit: logExpit,
    expit: expit,
    power: power,
    normalQuantile: normalQuantile,
  };
})();

if (typeof module !== "undefined") module.exports = toyrlKernels;
