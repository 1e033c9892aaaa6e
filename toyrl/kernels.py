"""Portable elementwise transcendental kernels: the same bits on every machine.

numpy chooses its ``exp``/``log``/``log1p``/``expm1`` loops by CPU (AVX-512, AVX2 and the baseline
round differently in the last bit), and training amplifies those last-bit differences. The kernels here
replace them. They are written only with IEEE-754 basic operations (``+ - * /`` and ``sqrt``, each
correctly rounded), ``floor``, ``frexp``/``ldexp`` by exact powers of two, comparisons, selects and
integer arithmetic on exponents, in a fixed order of operations given by explicit parentheses. numpy never
fuses two ufunc calls into a fused multiply-add, so every result is the same double wherever IEEE-754
doubles are: any CPU, operating system or numpy version. ``toyrl/explorer/kernels.js`` performs the same
operations in the same order, so the browser computes the same bits.

Sources. ``exp``, ``expm1``, ``log`` and ``log1p`` are vectorised ports of fdlibm / FreeBSD msun
(``e_exp.c``, ``s_expm1.c``, ``e_log.c``, ``s_log1p.c``): the high-word bit manipulations became
``frexp``, ``ldexp`` and comparisons, and the per-element branches became selects. ``power`` follows the
plan of fdlibm's ``e_pow.c``, log in extra precision then exp of the double-double product, with its own
table-driven double-double logarithm. ``softplus``, ``log_expit`` and ``expit`` combine a double-double
``exp`` with a ``log1p`` or a division that takes the low part into account. ``normal_quantile`` is
Wichura's AS241 (PPND16) on top of these kernels.

Accuracy, measured against 40-digit mpmath on dense grids and at the extremes (``tests/test_kernels.py``):
the error is below 1 ulp of the exact value for every function except ``normal_quantile`` (AS241 in
double precision: below 8 ulp). Each docstring gives the maximum measured on the test's grids, which the
test ties to its measurement; other inputs can come a little closer to those bounds.
Special values (signed zeros, infinities, nan, overflow, gradual underflow) follow the C99 / numpy
conventions listed per function; every nan result is the canonical quiet nan.

Shapes. Every function accepts array_like input, broadcasts like the ufunc it replaces and returns float64:
an ndarray of the broadcast shape for array input, a numpy ``float64`` scalar for a Python number or
0-d input. No floating-point warnings escape.

Speed. Each kernel is a fixed, short sequence of whole-array numpy operations (no Python loop over
elements); rare special inputs are patched with one mask and one final select, computed only when present.
A large input is taken CHUNK elements at a time (each of the many passes then stays in cache),
``expit_pair`` gives sigma(x) and sigma(-x) from one exponential, and ``expit_pair_softplus`` also a
token table's geometric rates: none of them changes a bit.

The compiled path. With numba installed (``pip install toyrl-drgrpo[fast]``), every public kernel can run
as ``toyrl.kernels_compiled``'s loop instead: the same operations in the same order on one element at a
time, compiled with fastmath off, so LLVM neither fuses a multiply and an add (no FMA) nor reassociates,
and frexp, ldexp and floor are exact there too: every result is the same double
(tests/test_kernels_compiled.py compares the bits on millions of inputs, also as compiled for numba's
generic CPU, and reads the assembly for FMA instructions). The environment
variable ``TOYRL_KERNELS`` chooses: ``numpy`` always this module's numpy code; ``compiled`` always the
compiled loops (an error if numba is missing); ``auto`` (the default) numpy until the process has made
enough kernel calls to repay the compiled path's start-up (importing numba and loading the compiled code
from numba's cache, about 0.45 s; compiling it the first time, about 5 s), then the compiled loops if
numba is installed. A compiled call is faster than numpy's at every size (20-50x for a few elements,
where numpy's dozens of passes cost their overhead; 3-20x for 10^4), so what calls must repay is the
start-up alone, and an input's size is no test of it. numba is imported on that first compiled call,
never by ``import toyrl``. The same decision turns on the compiled twins of other modules' loops
(`compiled_module`: ``toyrl.policy_compiled``'s sampled step, ``toyrl.expected_compiled``'s
mean-field sums, ``toyrl.results_compiled``'s CSV writer, and `toyrl.noise`'s transforms, which are
in this module's twin), which give the same bits (and bytes) too.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "exp",
    "expit",
    "expit_pair",
    "expit_pair_softplus",
    "expm1",
    "log",
    "log1p",
    "log_expit",
    "normal_quantile",
    "power",
    "softplus",
]

_F64 = NDArray[np.float64]
Kernel = TypeVar("Kernel", bound=Callable[..., Any])

# fdlibm's constants, given in hexadecimal so that they are exactly the intended doubles.
_INVLN2 = float.fromhex("0x1.71547652b82fep+0")  # 1/ln2
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")  # ln2 to 32 bits: k*_LN2_HI is exact for |k| < 2^21
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")  # ln2 - _LN2_HI
# exp: r*(e^r + 1)/(e^r - 1) ~ 2 + P1 r^2 + ... + P5 r^10 on |r| <= ln2/2 (error < 2^-59).
_P1 = float.fromhex("0x1.555555555553ep-3")
_P2 = float.fromhex("-0x1.6c16c16bebd93p-9")
_P3 = float.fromhex("0x1.1566aaf25de2cp-14")
_P4 = float.fromhex("-0x1.bbd41c5d26bf1p-20")
_P5 = float.fromhex("0x1.6376972bea4d0p-25")
# expm1: the scaled Q's of s_expm1.c (polynomial in hxs = r*r/2, error < 2^-61).
_Q1 = float.fromhex("-0x1.11111111110f4p-5")
_Q2 = float.fromhex("0x1.a01a019fe5585p-10")
_Q3 = float.fromhex("-0x1.4ce199eaadbb7p-14")
_Q4 = float.fromhex("0x1.0cfca86e65239p-18")
_Q5 = float.fromhex("-0x1.afdb76e09c32dp-23")
# log / log1p: (log(1+f) - 2s)/s - ... ~ Lg1 s^2 + ... + Lg7 s^14 on s in [0, 0.1716] (error < 2^-58.45).
_LG1 = float.fromhex("0x1.5555555555593p-1")
_LG2 = float.fromhex("0x1.999999997fa04p-2")
_LG3 = float.fromhex("0x1.2492494229359p-2")
_LG4 = float.fromhex("0x1.c71c51d8e78afp-3")
_LG5 = float.fromhex("0x1.7466496cb03dep-3")
_LG6 = float.fromhex("0x1.39a09d078c69fp-3")
_LG7 = float.fromhex("0x1.2f112df3e5244p-3")
# log1p takes f = x exactly (no correction term) when sqrt(2)/2 <= 1 + x < sqrt(2); s_log1p.c's bounds.
_LOG1P_MID_NEG = float.fromhex("-0x1.2bec5p-2")  # about 1/sqrt(2) - 1
_LOG1P_MID_POS = float.fromhex("0x1.a827ap-2")  # about sqrt(2) - 1
_SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")  # frexp mantissas below this are doubled
_TINY = float.fromhex("0x1p-54")  # expm1(x) = log1p(x) = x (correctly rounded) below this magnitude
_TWO_M1000 = float.fromhex("0x1p-1000")
_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's splitting constant for exact products without FMA
# Clamps that keep every intermediate finite; beyond them the result has already over- or underflowed.
_EXP_MIN, _EXP_MAX = -746.0, 710.0
_EXPM1_MIN = -40.0  # expm1(x) rounds to -1 below -38
_SOFTPLUS_LINEAR = 37.0  # softplus(x) rounds to x above 37 (e^-x < ulp(x)/2)
_POW_Y_MAX = float.fromhex("0x1p64")  # |y| >= 2^64 and x != 1: |y log x| > 2048, over- or underflow

# power's logarithm: log(i/128) for i = 91..181 as double-doubles (hi + lo, 106 bits), from mpmath.
_LOGC_FIRST = 91
_LOGC_HI = np.array(
    [
        -0.34117075740276714,
        -0.33024168687057687,
        -0.3194307707663612,
        -0.3087354816496133,
        -0.29815337231907635,
        -0.2876820724517809,
        -0.27731928541623435,
        -0.26706278524904525,
        -0.2569104137850272,
        -0.24686007793152578,
        -0.2369097470783577,
        -0.22705745063534608,
        -0.2173012756899814,
        -0.2076393647782445,
        -0.1980699137620938,
        -0.18859116980755003,
        -0.179201429457711,
        -0.16989903679539747,
        -0.16068238169047347,
        -0.15154989812720093,
        -0.14250006260728304,
        -0.13353139262452263,
        -0.1246424452072766,
        -0.1158318155251217,
        -0.1070981355563671,
        -0.09844007281325252,
        -0.08985632912186105,
        -0.0813456394539524,
        -0.07290677080808779,
        -0.06453852113757118,
        -0.05623971832287608,
        -0.048009219186360606,
        -0.039845908547199674,
        -0.0317486983145803,
        -0.023716526617316044,
        -0.015748356968139168,
        -0.007843177461025893,
        0.0,
        0.007782140442054949,
        0.015504186535965254,
        0.02316705928153438,
        0.030771658666753687,
        0.0383188643021366,
        0.0458095360312942,
        0.053244514518812285,
        0.06062462181643484,
        0.06795066190850775,
        0.07522342123758753,
        0.08244366921107459,
        0.08961215868968714,
        0.09672962645855111,
        0.10379679368164356,
        0.11081436634029011,
        0.11778303565638346,
        0.12470347850095724,
        0.13157635778871926,
        0.13840232285911913,
        0.1451820098444979,
        0.15191604202584197,
        0.15860503017663857,
        0.16524957289530717,
        0.17185025692665923,
        0.1784076574728183,
        0.184922338494012,
        0.19139485299962947,
        0.19782574332991987,
        0.2042155414286909,
        0.21056476910734964,
        0.21687393830061436,
        0.22314355131420976,
        0.22937410106484582,
        0.2355660713127669,
        0.24171993688714516,
        0.24783616390458127,
        0.25391520998096345,
        0.25995752443692605,
        0.26596354849713794,
        0.27193371548364176,
        0.2778684510034563,
        0.2837681731306446,
        0.28963329258304266,
        0.2954642128938359,
        0.3012613305781618,
        0.3070250352949119,
        0.3127557100038969,
        0.3184537311185346,
        0.324119468654212,
        0.329753286372468,
        0.3353555419211378,
        0.3409265869705932,
        0.34646676734620857,
    ]
)
_LOGC_LO = np.array(
    [
        1.9366790062602867e-17,
        1.0828321637483858e-17,
        -1.354256857264811e-18,
        1.6199186085148102e-17,
        1.720695867445866e-17,
        -2.607160616442564e-17,
        7.44528405583513e-18,
        7.32891532732017e-18,
        -2.502843296152504e-17,
        -1.361743371748368e-17,
        -1.9682402978398164e-18,
        -9.551415762738488e-18,
        -1.6168452453763015e-18,
        -1.2053243216686129e-17,
        -3.742843482461439e-18,
        7.432164219196925e-18,
        1.0785017454858423e-17,
        4.868008764439071e-19,
        3.650183553047837e-18,
        -5.1669593684615594e-18,
        9.926388234225749e-18,
        3.664457663660085e-18,
        5.808912678940971e-18,
        -4.338484369808096e-18,
        1.73705104015906e-18,
        4.439009633675136e-18,
        6.273760163689594e-19,
        -5.07707635593117e-18,
        6.306860257532778e-18,
        6.470486661692933e-18,
        3.2835149805605613e-18,
        -1.4390903347292205e-18,
        3.129547680315208e-18,
        -3.0382263084680858e-18,
        1.5774243488668215e-18,
        -1.0021578630528974e-18,
        -2.764708154124904e-19,
        0.0,
        -1.2819179123343845e-20,
        -3.278321022892429e-19,
        -1.1769544932063305e-18,
        1.0431732029005968e-18,
        -2.357996157351286e-18,
        1.902959866474257e-18,
        -1.665575816973663e-18,
        2.6424025938726934e-18,
        -1.2802141240611733e-18,
        -5.930604196293241e-18,
        5.700437773813987e-18,
        -5.4268129336647135e-18,
        -5.597397486289965e-19,
        5.47772415726659e-18,
        1.183748342825649e-18,
        -1.1971685747593677e-18,
        -4.6522609636496624e-18,
        1.1123000879729588e-17,
        4.447777301357527e-18,
        8.242418783022475e-18,
        6.4838631244022194e-18,
        1.1257003872182592e-17,
        -1.0094935622322628e-17,
        -6.0224538210113705e-18,
        -1.2432553788701131e-17,
        3.0236614153574064e-18,
        -1.2129496905792884e-17,
        1.2821194372980142e-17,
        2.7338281018722773e-18,
        -4.249405314729895e-18,
        4.551026193234283e-18,
        -9.091270597324799e-18,
        9.927671823978025e-18,
        -2.3943371495187355e-18,
        8.900990022166643e-18,
        -1.2432209578702523e-17,
        -8.048097394424201e-18,
        2.069806938978935e-17,
        5.3393802761314314e-18,
        7.83319637697442e-19,
        -9.16018294909263e-19,
        -2.032665581126656e-17,
        2.0535953219858174e-17,
        -2.16461086040599e-17,
        -9.048511144048564e-18,
        -1.2319916200101964e-17,
        -1.451808353098951e-17,
        2.7114779367326236e-17,
        -7.958214381893813e-18,
        2.122020616196946e-18,
        1.834564437059473e-17,
        1.7467136443544747e-17,
        1.028583585496265e-17,
    ]
)

# AS241 (PPND16) coefficients, highest degree first, as published.
_AS241_A = (
    2.5090809287301226727e3,
    3.3430575583588128105e4,
    6.7265770927008700853e4,
    4.5921953931549871457e4,
    1.3731693765509461125e4,
    1.9715909503065514427e3,
    1.3314166789178437745e2,
    3.3871328727963666080e0,
)
_AS241_B = (
    5.2264952788528545610e3,
    2.8729085735721942674e4,
    3.9307895800092710610e4,
    2.1213794301586595867e4,
    5.3941960214247511077e3,
    6.8718700749205790830e2,
    4.2313330701600911252e1,
    1.0,
)
_AS241_C = (
    7.74545014278341407640e-4,
    2.27238449892691845833e-2,
    2.41780725177450611770e-1,
    1.27045825245236838258e0,
    3.64784832476320460504e0,
    5.76949722146069140550e0,
    4.63033784615654529590e0,
    1.42343711074968357734e0,
)
_AS241_D = (
    1.05075007164441684324e-9,
    5.47593808499534494600e-4,
    1.51986665636164571966e-2,
    1.48103976427480074590e-1,
    6.89767334985100004550e-1,
    1.67638483018380384940e0,
    2.05319162663775882187e0,
    1.0,
)
_AS241_E = (
    2.01033439929228813265e-7,
    2.71155556874348757815e-5,
    1.24266094738807843860e-3,
    2.65321895265761230930e-2,
    2.96560571828504891230e-1,
    1.78482653991729133580e0,
    5.46378491116411436990e0,
    6.65790464350110377720e0,
)
_AS241_F = (
    2.04426310338993978564e-15,
    1.42151175831644588870e-7,
    1.84631831751005468180e-5,
    7.86869131145613259100e-4,
    1.48753612908506148525e-2,
    1.36929880922735805310e-1,
    5.99832206555887937690e-1,
    1.0,
)


CHUNK = 32_768  # elements per pass of a large input: each of a kernel's many passes then stays in cache


def _elementwise(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """The kernel applied CHUNK elements at a time to a large input (broadcast first): the same bits,
    since every result depends on its own element alone, at a fifth of the time for 10^6 elements."""

    @functools.wraps(kernel)
    def chunked(*args: ArrayLike) -> Any:
        if all(np.size(a) <= CHUNK for a in args) and (len(args) == 1 or np.broadcast(*args).size <= CHUNK):
            return kernel(*args)
        arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in args))
        flat = [a.reshape(-1) for a in arrays]
        out = np.empty(arrays[0].size)
        for start in range(0, len(out), CHUNK):
            out[start : start + CHUNK] = kernel(*(f[start : start + CHUNK] for f in flat))
        return out.reshape(arrays[0].shape)

    return chunked


# --------------------------------------------------------------------------------------------------------
# The compiled path (see the module's docstring): chosen per call, never changing a bit.

SWITCH = "TOYRL_KERNELS"
MODES = ("auto", "numpy", "compiled")
# `auto` turns to the compiled loops once the calls made so far would have saved their start-up, had they
# been compiled: a short job never pays it, a long one loses at most about one start-up's worth of saving
# before it does. Measured here (numba 0.68.1, 2 cores): a compiled call saves 20-80 us plus 10-85 ns an
# element (the lower ends below); the start-up is about 0.45 s from numba's cache.
START_UP = 0.5  # seconds
CALL_SAVING = 20e-6  # seconds
ELEMENT_SAVING = 25e-9  # seconds
_saving = 0.0  # what this process's numpy calls would have saved compiled, in seconds (auto mode)


@functools.cache
def _compiled_module() -> ModuleType | str:
    """toyrl.kernels_compiled, or why it cannot be imported: numba missing or unusable (ImportError),
    or no folder to cache the compiled code in (numba's RuntimeError when the module defines it)."""
    try:
        return importlib.import_module("toyrl.kernels_compiled")
    except (ImportError, RuntimeError) as error:
        return str(error)


def _compiled_path(args: tuple[Any, ...]) -> ModuleType | None:
    """toyrl.kernels_compiled when a kernel call on `args` should run compiled (`TOYRL_KERNELS`, read
    on every call: a test or a caller may change it within a process), else None. The arguments'
    size is taken in auto mode only, and only until the start-up is repaid."""
    global _saving
    mode = os.environ.get(SWITCH, "auto")
    if mode == "numpy":
        return None
    if mode == "auto" and _saving < START_UP:
        _saving += CALL_SAVING + ELEMENT_SAVING * max(np.size(a) for a in args)
        return None
    return compiled_module("toyrl.kernels_compiled", mode)


def compiled_module(name: str, mode: str | None = None) -> ModuleType | None:
    """The compiled module `name` (toyrl.kernels_compiled, or a twin of another module's functions
    such as toyrl.policy_compiled) when the compiled path is on, else None: with `TOYRL_KERNELS`
    numpy, never; compiled, always (InvalidInput if numba is missing); auto, once the kernels' calls
    have repaid the start-up (`_compiled_path`) and the module imports. `mode`: the switch, if read."""
    if mode is None:
        mode = os.environ.get(SWITCH, "auto")
    if mode == "numpy" or (mode == "auto" and _saving < START_UP):
        return None
    if mode not in MODES:
        from toyrl.config import InvalidInput

        raise InvalidInput(f"{SWITCH} must be one of {', '.join(MODES)} (got {mode!r})")
    module = _compiled_module() if name == "toyrl.kernels_compiled" else _twin_module(name)
    if isinstance(module, ModuleType):
        return module
    if mode == "auto":
        return None
    from toyrl import install
    from toyrl.config import InvalidInput

    raise InvalidInput(
        f"{SWITCH}=compiled needs numba, the optional extra fast ({module}): {install.hint('fast')}"
    )


@functools.cache
def _twin_module(name: str) -> ModuleType | str:
    """A compiled module other than the kernels', or why it cannot be imported (as `_compiled_module`)."""
    if isinstance(_compiled_module(), str):  # numba missing or unusable: its reason
        return cast(str, _compiled_module())
    try:
        return importlib.import_module(name)
    except (ImportError, RuntimeError) as error:
        return str(error)


def _dispatched(kernel: Kernel) -> Kernel:
    """The kernel, or its compiled twin when `_compiled_path` says so (the same bits either way)."""
    name = kernel.__name__

    @functools.wraps(kernel)
    def dispatch(*args: Any) -> Any:
        module = _compiled_path(args)
        return kernel(*args) if module is None else getattr(module, name)(*args)

    return cast(Kernel, dispatch)


def _errstate() -> np.errstate:
    return np.errstate(all="ignore")


# --------------------------------------------------------------------------------------------------------
# Shared pieces. Each takes and returns arrays (or numpy scalars); the order of operations is the contract.


def _scale(y: Any, k: Any) -> Any:
    """y * 2**k correctly rounded, for y in [0.5, 2] and integer-valued float k in [-1100, 1024].

    ldexp is exact while the result is normal; a subnormal result is formed by one rounding of a
    multiplication (y * 2**(k + 1000) is exact, times 2**-1000 rounds once), which every IEEE-754 machine
    performs identically, instead of trusting the platform's ldexp to round subnormals.
    """
    ki = k.astype(np.int32)
    out = np.ldexp(y, ki)
    low = ki < -1020
    if np.any(low):
        out = np.where(low, np.ldexp(y, ki + 1000) * _TWO_M1000, out)
    return out


def _scale_split(y: Any, k: Any) -> Any:
    """y * 2**k correctly rounded for any 2^-480 <= |y| <= 2^480 (or y = 0) and integer-valued k in
    [-1100, 1024]: (y * 2^(k>>1)) is exact, the second multiplication rounds once. For low parts."""
    ki = k.astype(np.int32)
    ka = ki >> 1
    return (y * np.ldexp(1.0, ka)) * np.ldexp(1.0, ki - ka)


def _reduce(x: Any) -> tuple[Any, Any, Any]:
    """k, hi, lo with x = k*ln2 + (hi - lo), |hi - lo| <= ln2/2 (k*_LN2_HI and x - k*_LN2_HI exact)."""
    k = np.floor(x * _INVLN2 + 0.5)
    hi = x - k * _LN2_HI
    lo = k * _LN2_LO
    return k, hi, lo


def _exp_c(r: Any) -> Any:
    """fdlibm's c = r - (P1 r^2 + ... + P5 r^10), so that e^r = 1 + r + r*c/(2 - c)."""
    t = r * r
    return r - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))


def _exp_sum(hi: Any, lo: Any) -> tuple[Any, Any]:
    """e^(hi - lo) = eh + el (|hi - lo| <= ln2/2 + tiny), eh in [0.7, 1.42], to about 2^-56 relative.

    fdlibm's e^r = 1 + r + r*c/(2 - c), with the reduced argument hi - lo carried as r + rl and the sum
    formed by Fast2Sum, so that eh is rounded once from a value whose error is far below its last bit.
    """
    r = hi - lo
    rl = (hi - r) - lo
    c = _exp_c(r)
    q = (r * c) / (2.0 - c)
    s = 1.0 + r
    s_err = (1.0 - s) + r
    tail = q + (s_err + (rl + r * rl))
    eh = s + tail
    return eh, (s - eh) + tail


def _exp_dd(x: Any) -> tuple[Any, Any, Any]:
    """e^x = (eh + el) * 2^k for x in [-746, 710] (see _exp_sum)."""
    k, hi, lo = _reduce(x)
    eh, el = _exp_sum(hi, lo)
    return eh, el, k


def _two_prod(a: Any, b: Any) -> tuple[Any, Any]:
    """p + e == a*b exactly (Dekker's product with Veltkamp splitting: no FMA needed)."""
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    p = a * b
    e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl
    return p, e


def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """s + e == a + b exactly (Knuth's TwoSum, no ordering requirement)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _log1p_core(x: Any, xl: Any | None) -> Any:
    """log(1 + x + xl) by s_log1p.c for finite x > -1 (xl: an optional low part, |xl| << ulp(x)).

    1 + x = 2^k (1 + f) with sqrt(2)/2 <= 1 + f < sqrt(2); f = x exactly when k = 0, otherwise
    u = fl(1 + x) is normalised by frexp and c/u corrects for the rounding of 1 + x (and adds xl).
    """
    u = 1.0 + x
    m, ex = np.frexp(u)
    small = m < _SQRT_HALF
    m = np.where(small, m + m, m)
    k = np.subtract(ex, small, dtype=np.float64)
    mid = (x > _LOG1P_MID_NEG) & (x < _LOG1P_MID_POS)
    c_round = np.where(u >= 2.0, 1.0 - (u - x), x - (u - 1.0))
    if xl is None:
        c = np.where(mid, 0.0, c_round / u)
    else:
        c = np.where(mid, xl, c_round + xl) / u
    f = np.where(mid, x, m - 1.0)
    k = np.where(mid, 0.0, k)
    hfsq = (0.5 * f) * f
    s = f / (2.0 + f)
    z = s * s
    big_r = z * (_LG1 + z * (_LG2 + z * (_LG3 + z * (_LG4 + z * (_LG5 + z * (_LG6 + z * _LG7))))))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + big_r) + (k * _LN2_LO + c))) - f)


def _log1p_finish(x: Any, out: Any) -> Any:
    """Apply log1p's exact cases: |x| < 2^-54 -> x (keeps -0), x = -1 -> -inf, x < -1 or nan -> nan."""
    out = np.where(np.abs(x) < _TINY, x, out)
    bad = ~((x > -1.0) & (x < np.inf))
    if np.any(bad):
        special = np.where(x == -1.0, -np.inf, np.where(x == np.inf, np.inf, np.nan))
        out = np.where(bad, special, out)
    return out


def _softplus_argument(x: Any) -> Any:
    """x clamped to where softplus takes e^x: the argument of its double-double exponential."""
    return np.fmax(np.fmin(x, _SOFTPLUS_LINEAR), _EXP_MIN)


def _softplus(x: Any) -> Any:
    """log(1 + e^x) = log1p of the double-double e^x (see softplus); nan inputs give some nan."""
    eh, el, k = _exp_dd(_softplus_argument(x))
    return _softplus_finish(x, _scale(eh, k), _scale_split(el, k))


def _softplus_finish(x: Any, th: Any, tl: Any) -> Any:
    """softplus(x) from e^x = th + tl (of `_softplus_argument(x)`)."""
    out = _log1p_core(th, tl)
    out = np.where(th < _TINY, th, out)
    return np.where(x > _SOFTPLUS_LINEAR, x, out)


def _nan_to_canonical(x: Any, out: Any) -> Any:
    """The canonical quiet nan wherever x is nan (whatever sign or payload arithmetic left there)."""
    nan = np.isnan(x)
    if np.any(nan):
        out = np.where(nan, np.nan, out)
    return out


def _log_dd(x: Any) -> tuple[Any, Any]:
    """log(x) = lh + ll for finite x > 0, to about 2^-70 relative (table-driven, for power).

    x = 2^k m with sqrt(2)/2 <= m < sqrt(2); c = i/128 is the nearest table point, f = m - c is exact,
    s = f/(m + c) is formed as a double-double, and log(m/c) = 2 atanh(s) = 2s + 2s^3/3 + ... with
    |s| < 2^-8.5, so the odd series to s^9 in plain doubles is far below the last bit.
    """
    m, ex = np.frexp(x)
    small = m < _SQRT_HALF
    m = np.where(small, m + m, m)
    k = np.subtract(ex, small, dtype=np.float64)
    fi = np.floor(m * 128.0 + 0.5)
    c = fi * 0.0078125
    idx = fi.astype(np.intp) - _LOGC_FIRST  # out of range only for x = 0, inf, nan (patched later)
    f = m - c
    c2 = c + c
    dh = c2 + f
    dl = f - (dh - c2)
    sh = f / dh
    p, pe = _two_prod(sh, dh)
    sl = (((f - p) - pe) - sh * dl) / dh
    z = sh * sh
    uh = sh + sh
    tail = (uh * z) * (1.0 / 3.0 + z * (0.2 + z * (1.0 / 7.0 + z * (1.0 / 9.0))))
    s1, e1 = _two_sum(k * _LN2_HI, np.take(_LOGC_HI, idx, mode="clip"))
    s2, e2 = _two_sum(s1, uh)
    lo = ((((e1 + e2) + k * _LN2_LO) + np.take(_LOGC_LO, idx, mode="clip")) + (sl + sl)) + tail
    lh = s2 + lo
    ll = (s2 - lh) + lo
    return lh, ll


def _horner(coefs: tuple[float, ...], r: Any) -> Any:
    """((c0*r + c1)*r + c2)... in this fixed order (c0 = highest degree)."""
    acc = coefs[0] * r + coefs[1]
    for coef in coefs[2:]:
        acc = acc * r + coef
    return acc


def _result(out: Any) -> Any:
    """ndarray for array input, numpy float64 scalar for 0-d input."""
    return out[()] if isinstance(out, np.ndarray) else np.float64(out)


# --------------------------------------------------------------------------------------------------------
# Public kernels.


@_dispatched
@_elementwise
def exp(x: ArrayLike) -> Any:
    """e^x, fdlibm's e_exp.c.

    Range reduction: x = k ln2 + r with k = floor(x/ln2 + 1/2), r = hi - lo (ln2 split in a 32-bit high
    part, so k*ln2_hi is exact), |r| <= ln2/2. Then e^r = 1 + r + r c/(2 - c) with
    c = r - (P1 r^2 + ... + P5 r^10) (Remez, error < 2^-59), and e^x = 2^k e^r (a subnormal result
    rounded once). Special values: exp(nan) = nan, exp(+inf) = inf, exp(-inf) = 0, overflow to inf
    above 709.782712893384, gradual underflow to 0 below -745.1332191019412.
    Measured error on the accuracy test's grids: at most 0.63 ulp (a subnormal result is rounded twice).
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        xc = np.fmin(np.fmax(x, _EXP_MIN), _EXP_MAX)
        eh, _, k = _exp_dd(xc)
        out = _scale(eh, k)
        out = _nan_to_canonical(x, out)
    return _result(out)


@_dispatched
@_elementwise
def expm1(x: ArrayLike) -> Any:
    """e^x - 1, fdlibm's s_expm1.c.

    Range reduction as in exp, with the rounding error of r = hi - lo kept in c = (hi - r) - lo.
    expm1(r) = r - E with E from R1(r^2) ~ 1 + Q1 hxs + ... + Q5 hxs^5 (hxs = r^2/2, error < 2^-61),
    corrected for c. Scaling back, by the size of k: k <= 19: 2^k (r - E) + (2^k - 1) (for k = 1 and
    r < -0.25: 2((r + 1/2) - E)); 20 <= k <= 56: 2^k ((r - (E + 2^-k)) + 1); k > 56: 2^k (1 + r - E) - 1.
    |x| < 2^-54 returns x (so -0 stays -0); x < -40 gives -1; +inf gives inf, -inf gives -1, nan gives nan.
    Measured error on the accuracy test's grids: at most 0.75 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        xc = np.fmin(np.fmax(x, _EXPM1_MIN), _EXP_MAX)
        k, hi, lo = _reduce(xc)
        r = hi - lo
        c = (hi - r) - lo
        hfx = 0.5 * r
        hxs = r * hfx
        r1 = 1.0 + hxs * (_Q1 + hxs * (_Q2 + hxs * (_Q3 + hxs * (_Q4 + hxs * _Q5))))
        t = 3.0 - r1 * hfx
        e = hxs * ((r1 - t) / (6.0 - r * t))
        e = (r * (e - c) - c) - hxs
        ki = k.astype(np.int32)
        u = np.ldexp(1.0, np.minimum(ki, 19))
        out = (r - e) * u + (u - 1.0)
        near_half = (ki == 1) & (r < -0.25)
        out = np.where(near_half, ((r + 0.5) - e) * 2.0, out)
        big = ki >= 20
        if np.any(big):
            kc = np.minimum(ki, 56)
            u = np.ldexp(1.0, kc)
            mid = ((r - (e + np.ldexp(1.0, -kc))) + 1.0) * u
            far = _scale(1.0 - (e - r), k) - 1.0
            out = np.where(big, np.where(ki <= 56, mid, far), out)
        out = np.where(np.abs(x) < _TINY, x, out)
        out = _nan_to_canonical(x, out)
    return _result(out)


@_dispatched
@_elementwise
def log(x: ArrayLike) -> Any:
    """Natural logarithm, fdlibm's e_log.c.

    Range reduction by frexp: x = 2^k (1 + f) with sqrt(2)/2 <= 1 + f < sqrt(2) (f exact; subnormal x
    handled by frexp). With s = f/(2 + f), hfsq = f^2/2 and R = Lg1 s^2 + ... + Lg7 s^14 (Remez on
    [0, 0.1716], error < 2^-58.45): log x = k ln2_hi - ((hfsq - (s (hfsq + R) + k ln2_lo)) - f).
    Special values: log(0) = -inf (either sign of zero), log(x < 0) = nan, log(inf) = inf, log(nan) = nan.
    Measured error on the accuracy test's grids: at most 0.73 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        m, ex = np.frexp(x)
        small = m < _SQRT_HALF
        m = np.where(small, m + m, m)
        k = np.subtract(ex, small, dtype=np.float64)
        f = m - 1.0
        hfsq = (0.5 * f) * f
        s = f / (2.0 + f)
        z = s * s
        big_r = z * (_LG1 + z * (_LG2 + z * (_LG3 + z * (_LG4 + z * (_LG5 + z * (_LG6 + z * _LG7))))))
        out = k * _LN2_HI - ((hfsq - (s * (hfsq + big_r) + k * _LN2_LO)) - f)
        bad = ~((x > 0.0) & (x < np.inf))
        if np.any(bad):
            special = np.where(x == 0.0, -np.inf, np.where(x == np.inf, np.inf, np.nan))
            out = np.where(bad, special, out)
    return _result(out)


@_dispatched
@_elementwise
def log1p(x: ArrayLike) -> Any:
    """log(1 + x), fdlibm's s_log1p.c.

    1 + x = 2^k (1 + f) with sqrt(2)/2 <= 1 + f < sqrt(2): f = x when k = 0 (-0.2929 < x < 0.4142),
    else u = fl(1 + x) is normalised by frexp and c/u (c = the rounding error of 1 + x) is added back.
    Then log1p = k ln2_hi - ((hfsq - (s (hfsq + R) + (k ln2_lo + c/u))) - f) with e_log.c's s, hfsq, R.
    |x| < 2^-54 returns x (so -0 stays -0); log1p(-1) = -inf, x < -1 or nan gives nan, inf gives inf.
    Measured error on the accuracy test's grids: at most 0.74 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        out = _log1p_finish(x, _log1p_core(x, None))
    return _result(out)


@_dispatched
@_elementwise
def softplus(x: ArrayLike) -> Any:
    """log(1 + e^x) (numpy's logaddexp(0, x)), to within 1 ulp everywhere.

    Composition alone (log1p(exp(x))) can exceed 1 ulp, so e^x is formed as a double-double
    (eh + el) 2^k by exp's reduction and polynomial, and log1p takes the low part into its correction
    term: log1p(t + tl) = log1p(t) + tl/(1 + t). Below e^x < 2^-54 the result is e^x itself (rounded
    once); above x = 37 it is x (e^-x < ulp(x)/2). softplus(-inf) = 0, softplus(inf) = inf, nan -> nan.
    Measured error on the accuracy test's grids: at most 0.74 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        out = _nan_to_canonical(x, _softplus(x))
    return _result(out)


@_dispatched
@_elementwise
def log_expit(x: ArrayLike) -> Any:
    """log(1/(1 + e^-x)) = -softplus(-x) (scipy.special.log_expit): same operations and accuracy.

    log_expit(+inf) = -0, log_expit(-inf) = -inf, nan -> nan.
    Measured error on the accuracy test's grids: at most 0.75 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        out = _nan_to_canonical(x, -_softplus(-x))
    return _result(out)


def _quotient(nh: Any, nl: Any, dh: Any, dl: Any) -> Any:
    """(nh + nl)/(dh + dl) rounded from q = nh/dh and its correction (nh - q dh - q dl + nl)/dh, with
    q dh formed exactly by Dekker's product, so that only the final addition rounds to any extent."""
    q = nh / dh
    p, pe = _two_prod(q, dh)
    return q + ((((nh - p) - pe) + nl) - q * dl) / dh


def _expit_both(x: Any) -> tuple[Any, Any]:
    """(1/(1 + e^-x), 1/(1 + e^x)) for an array x, from one double-double t = e^-|x| = (eh + el) 2^k:
    1/(1 + t) is the one of |x|, t/(1 + t) (formed unscaled, times 2^k at the end: one rounding for
    subnormal results) the one of -|x|."""
    eh, el, k = _exp_dd(np.fmax(-np.abs(x), _EXP_MIN))
    return _expit_finish(x, eh, el, k, _scale(eh, k), _scale_split(el, k))


def _expit_finish(x: Any, eh: Any, el: Any, k: Any, th: Any, tl: Any) -> tuple[Any, Any]:
    """(expit(x), expit(-x)) from e^-|x| = (eh + el) 2^k = th + tl."""
    neg = x < 0.0
    dh = 1.0 + th
    dl = ((1.0 - dh) + th) + tl
    large = _quotient(1.0, 0.0, dh, dl)
    small = _scale(_quotient(eh, el, dh, dl), k)
    nan = np.isnan(x)
    if np.any(nan):
        large, small = np.where(nan, np.nan, large), np.where(nan, np.nan, small)
    return np.where(neg, small, large), np.where(neg, large, small)


@_dispatched
@_elementwise
def expit(x: ArrayLike) -> Any:
    """1/(1 + e^-x), the logistic sigmoid, with relative accuracy for small results.

    With a = -|x| and t = e^a formed as the double-double (eh + el) 2^k (exp's reduction), the result is
    1/(1 + t) for x >= 0 and t/(1 + t) for x < 0. The quotient n/d of double-doubles is the rounded
    quotient q = nh/dh plus the correction (nh - q dh - q dl + nl)/dh, with q dh formed exactly by
    Dekker's product, so only the final addition rounds to any extent; for x < 0 it is formed unscaled
    and multiplied by 2^k at the end (one rounding for subnormal results).
    expit(-inf) = 0, expit(inf) = 1, exactly 0 below x = -745.13 and 1 above x = 37.4; nan -> nan.
    Measured error on the accuracy test's grids: at most 0.71 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    with _errstate():
        out = _expit_both(x)[0]
    return _result(out)


@_dispatched
def expit_pair(x: ArrayLike) -> tuple[Any, Any]:
    """(expit(x), expit(-x)), the same bits as the two calls, at about the cost of one: both come
    from the one t = e^-|x| (see expit). For arrays (a token table's sigma and 1 - sigma)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size > CHUNK:
        return expit(x), expit(-x)
    with _errstate():
        positive, negative = _expit_both(x)
    return _result(positive), _result(negative)


@_dispatched
def expit_pair_softplus(x: ArrayLike, columns: int) -> tuple[Any, Any, Any]:
    """(expit(x), expit(-x), softplus(x[..., -columns:])), the same bits as the three calls, from
    one double-double exponential of both kernels' arguments side by side: for a token table
    [R, P + 2], sigma and 1 - sigma of every logit and the geometric rate of the two stop logits."""
    x = np.asarray(x, dtype=np.float64)
    tail = x[..., x.shape[-1] - columns :]
    if x.size > CHUNK:
        return expit(x), expit(-x), softplus(tail)
    with _errstate():
        width = x.shape[-1]
        arguments = np.concatenate((np.fmax(-np.abs(x), _EXP_MIN), _softplus_argument(tail)), axis=-1)
        eh, el, k = _exp_dd(arguments)
        th, tl = _scale(eh, k), _scale_split(el, k)
        pair = [part[..., :width] for part in (eh, el, k, th, tl)]
        positive, negative = _expit_finish(x, *pair)
        rate = _nan_to_canonical(tail, _softplus_finish(tail, th[..., width:], tl[..., width:]))
    return _result(positive), _result(negative), _result(rate)


@_dispatched
@_elementwise
def power(x: ArrayLike, y: ArrayLike) -> Any:
    """x**y for x >= 0 and finite y, within 1 ulp (fdlibm e_pow.c's plan: log in extra precision).

    log x = lh + ll is a double-double to about 2^-70 relative (see _log_dd: x = 2^k m, a 91-entry
    table of log(i/128), the odd series of 2 atanh(s) with |s| < 2^-8.5). y log x = zh + zl follows
    exactly from Dekker's product, and e^(zh + zl) is exp's algorithm with zl folded into the low part of
    the reduced argument. Exact cases: x**0 = 1 (also for nan x), 1**y = 1 (also for nan y), x**1 = x,
    0**y = 0 for y > 0 and inf for y < 0 (as in C99, -0 and -inf for x = -0 and an odd integer y),
    inf**y = inf for y > 0 and 0 for y < 0; x < 0 or a nan gives nan (numpy's signed results for negative
    x and integer y are not provided); |y| = inf follows the C99 rules through overflow and underflow.
    Measured error on the accuracy test's grids: at most 0.59 ulp.
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    with _errstate():
        lh, ll = _log_dd(x)
        yc = np.fmin(np.fmax(y, -_POW_Y_MAX), _POW_Y_MAX)
        ph, pl = _two_prod(yc, lh)
        pl = pl + yc * ll
        zh = ph + pl
        zl = (ph - zh) + pl
        zc = np.fmin(np.fmax(zh, _EXP_MIN), _EXP_MAX)
        k = np.floor(zc * _INVLN2 + 0.5)
        hi = zc - k * _LN2_HI
        eh, _ = _exp_sum(hi, k * _LN2_LO - zl)
        out = _scale(eh, k)
        special = ~((x > 0.0) & (x < np.inf) & (y != 0.0) & (y != 1.0) & (x != 1.0) & (y == y))
        if np.any(special):
            odd = (y - 2.0 * np.floor(0.5 * y)) == 1.0  # y an odd integer (exact; never for |y| >= 2^53)
            out = np.select(
                [
                    (y == 0.0) | (x == 1.0),
                    np.isnan(x) | np.isnan(y) | (x < 0.0),
                    y == 1.0,
                    x == 0.0,
                    x == np.inf,
                ],
                [
                    1.0,
                    np.nan,
                    x,
                    np.copysign(np.where(y > 0.0, 0.0, np.inf), np.where(odd, x, 1.0)),
                    np.where(y > 0.0, np.inf, 0.0),
                ],
                out,
            )
    return _result(out)


@_dispatched
@_elementwise
def normal_quantile(p: ArrayLike) -> Any:
    """The standard normal quantile Phi^-1(p), Wichura's AS241 (PPND16), with this module's log.

    q = p - 1/2; for |q| <= 0.425, r = 0.180625 - q^2 and x = q A(r)/B(r); otherwise r = sqrt(-log(m))
    with m = min(p, 1 - p) (1 - p is exact for p >= 1/2) and x = C(r - 1.6)/D(r - 1.6) for r <= 5,
    E(r - 5)/F(r - 5) beyond, negated for q < 0. Degree-7 rationals in Horner form, highest degree first.
    p = 0 gives -inf, p = 1 gives inf, p outside [0, 1] or nan gives nan.
    Measured error on the accuracy test's grids: at most 5.71 ulp: AS241's approximation is good to
    about 1e-16, the rest is rounding in the double-precision evaluation of its degree-7 rationals.
    That rounding makes it not monotone at the ulp level: of two neighbouring doubles p < p', p' can give
    the smaller value. toyrl's inputs (`toyrl.noise.open_uniform`: (k + 1/2) 2^-52, two or more ulp
    apart) are far enough apart that no decrease has been found between consecutive ones (the accuracy
    test checks windows of them across (0, 1)), though none is proved impossible.
    """
    p = np.asarray(p, dtype=np.float64)
    with _errstate():
        q = p - 0.5
        central = np.abs(q) <= 0.425
        out = np.empty_like(q)
        qc = q[central]
        rc = 0.180625 - qc * qc
        out[central] = (_horner(_AS241_A, rc) * qc) / _horner(_AS241_B, rc)
        tails = ~central
        qt = q[tails]
        pt = p[tails]
        rt = np.sqrt(-log(np.where(qt <= 0.0, pt, 1.0 - pt)))
        near = rt <= 5.0
        rn = rt - 1.6
        rf = rt - 5.0
        xt = np.where(
            near,
            _horner(_AS241_C, rn) / _horner(_AS241_D, rn),
            _horner(_AS241_E, rf) / _horner(_AS241_F, rf),
        )
        out[tails] = np.where(qt < 0.0, -xt, xt)
        bad = ~((p > 0.0) & (p < 1.0))
        if np.any(bad):
            out = np.where(bad, np.where(p == 0.0, -np.inf, np.where(p == 1.0, np.inf, np.nan)), out)
    return _result(out)
