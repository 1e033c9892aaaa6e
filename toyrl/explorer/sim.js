/* toyrl's simulator, in the page: the ramble policy, every registered stage, sampled training and
   mean-field training on the exact expected update. A port of toyrl.policy, toyrl.stages,
   toyrl.train and toyrl.expected that computes the same bits as the package: every transcendental
   is toyrlKernels' (kernels.js, toyrl.kernels operation for operation), every random number is
   drawn from numpy's PCG64 streams by toyrlRandom (random.js) and transformed as toyrl.noise does,
   and every formula keeps Python's order of operations, numpy's pairwise sums included.
   tests/test_explorer.py checks it against `toyrl run`, value for value, in headless Chromium.

   window.toyrl:
     data                 the embedded TOYRL_DATA (toyrl.explore.page_data)
     presets              data.variants, each with its spec (parsed from spec_text), `page` and
                          `page_mean_field`: '' if the page trains it (sampled / mean-field),
                          else why not
     resolve(variant)     a preset name, a spec text "advantage=none,aggregation=token_mean" or a
                          spec object -> {name, spec, stages}; throws InputError (one line)
     support(variant, meanField)  '' or the reason the page cannot train it
     checkSetting(name, value, written)  throws InputError unless a Config field's value is in its
                          range (toyrl.config's, from the data), the message quoting `written`
     start(spec)          a run, trained step by step: {runs, steps, t, done, advance(n), column(name)}
     simulate(spec)       start(spec) run to the end, as the flat columns of `toyrl run`
     ports                each Python stage class's twin, {kind: {class name: its methods}} (`port`)
   spec: {variants: [...] (or variant: one), seeds: n (0..n-1) or [seeds], steps, mean_field,
          any Config field; theta0 [per seed: P + 2 logits] to start elsewhere than the seed's
          initial policy; gradients: true keeps each step's loss gradient}.
   A run (variant, seed) owns the six streams of toyrl.train.STREAMS, SeedSequence(seed).spawn(6),
   and draws from them exactly what Python draws: seed s in the page is the run `toyrl run` makes
   of seed s. The variants of a seed share its initial logits and step noise (common random
   numbers), as in toyrl.train. */
"use strict";
(function () {
  const DATA = TOYRL_DATA;
  const K = toyrlKernels; // exp, expm1, log, log1p, softplus, logExpit, expit, power, normalQuantile
  const TINY = 2.2250738585072014e-308; // smallest normal double (toyrl.policy.TINY)
  const P_INCORRECT_DIRECT = 1e-200;
  const VESPO_LOG_FLOOR = -18.420680743952367; // log(1e-8), TRL's lower clamp of log w (toyrl.stages)
  const SCORE_EXACT_ABOVE = 12.0;
  const EXACT_COLUMNS = [
    "accuracy", "length_mean", "length_correct", "length_incorrect", "length_right_approach",
    "length_wrong_approach", "p_right_approach", "stop_prob_right", "stop_prob_wrong",
  ];
  const SAMPLED_COLUMNS = [
    "batch_accuracy", "batch_length_mean", "batch_length_correct", "batch_length_incorrect",
    "zero_variance_fraction", "tokens_sampled",
  ];
  const COLUMNS = [...EXACT_COLUMNS, ...SAMPLED_COLUMNS, "grad_norm", "clip_fraction"];

  class InputError extends Error {}
  const fail = (message) => { throw new InputError(message); };

  // --- numerics: toyrl.policy's formulas, on toyrl.kernels' functions ---------------------------
  const expit = K.expit, logExpit = K.logExpit, softplus = K.softplus;
  const logContinue = (phi) => -softplus(phi); // log(1 - s)
  const survival = (n, phi) => K.exp(n * logContinue(phi)); // P(K > n)
  const stopWithin = (n, phi) => -K.expm1(n * logContinue(phi)); // P(K <= n)
  const clip = (x, low, high) => Math.min(Math.max(x, low), high);

  /* sum(values[start .. start + n)) in numpy's order (its pairwise summation: eight running sums in
     blocks of up to 128, halves beyond), so that a sum that cancels (a score's expectation, 0 in exact
     arithmetic) rounds as numpy's does and Adam, which rescales a gradient entry of any size, is not
     sent elsewhere by the order of the additions alone. */
  function sum(values, start = 0, n = values.length - start) {
    if (n < 8) {
      let total = 0;
      for (let i = start; i < start + n; i++) total += values[i];
      return total;
    }
    if (n <= 128) {
      let r0 = values[start], r1 = values[start + 1], r2 = values[start + 2], r3 = values[start + 3];
      let r4 = values[start + 4], r5 = values[start + 5], r6 = values[start + 6], r7 = values[start + 7];
      const blocks = n - (n % 8);
      let i = 8;
      for (; i < blocks; i += 8) {
        const k = start + i;
        r0 += values[k]; r1 += values[k + 1]; r2 += values[k + 2]; r3 += values[k + 3];
        r4 += values[k + 4]; r5 += values[k + 5]; r6 += values[k + 6]; r7 += values[k + 7];
      }
      let total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
      for (; i < n; i++) total += values[start + i];
      return total;
    }
    let half = Math.floor(n / 2);
    half -= half % 8;
    return sum(values, start, half) + sum(values, start + half, n - half);
  }
  function logStopWithin(n, phi) { // log P(K <= n), finite where P(K <= n) underflows
    const logY = phi < -40 ? phi : K.log(softplus(phi));
    const logX = K.log(n) + logY;
    return logX < -40 ? logX : K.log(stopWithin(n, phi));
  }

  function expectedLength(phi, cap) { // E[min(K, cap)], in [1, cap]
    if (softplus(phi) < TINY) return cap;
    return clip(stopWithin(cap, phi) / stopWithin(1, phi), 1, cap);
  }

  function truncatedMean(n, phi) { // E[K | K <= n], with its series where the terms cancel
    const y = softplus(phi);
    const x = n * y;
    let value;
    if (x < 1e-2) { // products, not powers, as Python's
      const nSquared = n * n;
      value = (n + 1) / 2 - (nSquared - 1) * y / 12 + (nSquared * nSquared - 1) * (y * y * y) / 720;
    } else {
      value = 1 / -K.expm1(-y) - n / K.expm1(x);
    }
    return clip(value, 1, (n + 1) / 2);
  }

  /* log mean_j sigma(sign logit_j): the largest log sigma plus the log of the mean of the exps
     relative to it (toyrl.policy._log_mean_expit). */
  function logMeanExpit(logits, sign) {
    const logs = logits.map((x) => logExpit(sign * x));
    let top = -Infinity;
    for (const v of logs) top = Math.max(top, v);
    return top + K.log(sum(logs.map((v) => K.exp(v - top))) / logs.length);
  }

  function lengthIncorrectTail(psi, phiRight, cap, minLength, lengthWrong, shortMean) {
    const logWrong = logMeanExpit(psi, -1);
    const logRight = logMeanExpit(psi, 1);
    const logTruncated = logRight - cap * softplus(phiRight);
    const logShort = minLength > 1 ? logRight + logStopWithin(minLength - 1, phiRight) : -Infinity;
    const top = Math.max(logWrong, Math.max(logShort, logTruncated));
    const [w, s, t] = [logWrong, logShort, logTruncated].map((v) => K.exp(v - top));
    return (w * lengthWrong + s * shortMean + t * cap) / (w + s + t);
  }

  /* Exact expectations under the policy theta [P + 2] (toyrl.policy.exact_metrics). */
  function exactMetrics(theta, cap, minLength) {
    const P = theta.length - 2;
    const phiRight = theta[P], phiWrong = theta[P + 1];
    const right = new Float64Array(P), wrong = new Float64Array(P);
    for (let j = 0; j < P; j++) { right[j] = expit(theta[j]); wrong[j] = expit(-theta[j]); }
    const pRight = sum(right) / P, pWrong = sum(wrong) / P;
    const window = cap - minLength + 1;
    const stopInWindow = survival(minLength - 1, phiRight) * stopWithin(window, phiRight);
    const short = stopWithin(minLength - 1, phiRight);
    const truncated = survival(cap, phiRight);
    const lengthRight = expectedLength(phiRight, cap);
    const lengthWrong = expectedLength(phiWrong, cap);
    const shortMean = truncatedMean(Math.max(minLength - 1, 1), phiRight);
    const shortLength = minLength > 1 ? short * shortMean : 0;
    const pIncorrect = pWrong + pRight * (short + truncated);
    const lengthIncorrect = pIncorrect >= P_INCORRECT_DIRECT
      ? (pWrong * lengthWrong + pRight * (shortLength + cap * truncated)) / pIncorrect
      : lengthIncorrectTail(Array.from(theta.subarray(0, P)), phiRight, cap, minLength, lengthWrong, shortMean);
    return {
      accuracy: pRight * stopInWindow,
      length_mean: clip(pRight * lengthRight + pWrong * lengthWrong, 1, cap),
      length_correct: clip(minLength - 1 + truncatedMean(window, phiRight), minLength, cap),
      length_incorrect: clip(lengthIncorrect, 1, cap),
      length_right_approach: lengthRight,
      length_wrong_approach: lengthWrong,
      p_right_approach: pRight,
      stop_prob_right: expit(phiRight),
      stop_prob_wrong: expit(phiWrong),
    };
  }

  // --- randomness: numpy's streams (toyrl.train.run_streams), transformed as toyrl.noise does ----
  const STREAM = { init: 0, prompts: 1, approach: 2, length: 3, shuffle: 4, refill: 5 }; // toyrl.train.STREAMS

  /* n standard exponentials, -log U with U = ((x >> 12) + 1/2) 2^-52 (toyrl.noise.standard_exponential),
     into out[offset ..]. */
  function exponentials(rng, n, out = new Float64Array(n), offset = 0) {
    rng.fill(n, "open", out, offset);
    for (let i = offset; i < offset + n; i++) out[i] = -K.log(out[i]);
    return out;
  }

  /* A run's refill stream: a sampler's further draws (toyrl.noise.uniform, standard_exponential). */
  const refillSource = (rng) => ({ random: (n) => rng.fill(n, "random"), exponential: (n) => exponentials(rng, n) });

  // --- configuration (toyrl.config.Config's fields, their ranges as Python declares them) --------
  const CONFIG_FIELDS = Object.keys(DATA.config);
  const LIMITS = DATA.limits; // toyrl run's bounds and the page's own (toyrl.explore.page_data)

  /* InputError unless c[name] is of the field's kind and in its range; `written`: the value as the
     user wrote it, for the message (by default the value itself). */
  function checkField(c, name, written) {
    const v = c[name], { kind, low, high, low_open: lowOpen, high_open: highOpen, zero, requirement } = DATA.config[name].bounds;
    let ok = kind === "boolean" ? typeof v === "boolean" : kind === "integer" ? Number.isInteger(v) : typeof v === "number" && Number.isFinite(v);
    if (ok && low !== null) ok = lowOpen ? v > low : v >= low;
    if (ok && high !== null) ok = highOpen ? v < high : v <= high;
    if (!ok && zero && v === 0) ok = true; // 0 means something of its own (length_norm's "the cap")
    if (!ok) fail(`${name} ${requirement} (got ${written ?? JSON.stringify(v)})`);
  }

  function makeConfig(fields) {
    const c = {};
    for (const name of CONFIG_FIELDS) c[name] = name in fields ? fields[name] : DATA.config[name].default;
    for (const name of CONFIG_FIELDS) checkField(c, name);
    const refusal = firstRefused(DATA.refusals.config, valueOf(c, {})); // as toyrl.config.ConfigError says it
    if (refusal) fail(`${refusal.field} ${says(refusal, valueOf(c, {}))} (got ${pythonRepr(c[refusal.field])})`);
    c.length_norm_value = c.length_norm > 0 ? c.length_norm : c.cap;
    c.approach_tokens = c.count_approach_token ? 1 : 0;
    return c;
  }

  // --- variants: specs resolved against the Python registry ---------------------------------------
  const REGISTRY = DATA.registry;
  // spec key -> stage kind ("aggregation" -> "normaliser"), in a spec's order (toyrl.objective.kind_keys)
  const KIND_KEYS = Object.fromEntries([...DATA.kinds].sort((a, b) => a.spec_place - b.spec_place).map((kind) => [kind.key, kind.name]));
  // a spec's refusal, in Python's words (toyrl.objective.SPEC_MESSAGES), its names given
  const sayKey = (message, given = {}) => say(DATA.spec_messages[message], (name) => given[name]);
  // each preset's spec parsed from Python's own text of it (the data ships the text only)
  const PRESETS = new Map(DATA.variants.map((v) => [v.name, { ...v, spec: parseSpecText(v.spec_text) }]));

  function parseSpecText(text) { // "key=value,...", values typed as toyrl.objective.parse_spec does
    const spec = {};
    for (const item of text.split(",").map((s) => s.trim()).filter(Boolean)) {
      const at = item.indexOf("=");
      if (at < 1) fail(sayKey("not_key_value", { text, part: item }));
      const key = item.slice(0, at).trim(), raw = item.slice(at + 1).trim();
      spec[key] = raw === "true" || raw === "True" ? true : raw === "false" || raw === "False" ? false
        : raw === "None" || raw === "null" ? null : raw !== "" && Number.isFinite(Number(raw)) ? Number(raw) : raw;
    }
    return spec;
  }

  // A label (toyrl.variants: `label=NAME` among a spec's pairs, or NAME=SPEC / NAME=PRESET), held
  // to Python's rules, shipped as data (DATA.labels), in its words.
  const LABELS = DATA.labels;
  // toyrl.objective.spec_keys: the kinds, mask_truncated and every stage's parameters (and eps, label)
  const SPEC_KEYS = new Set([...Object.keys(KIND_KEYS), "mask_truncated", "label", "eps",
    ...Object.values(REGISTRY).flatMap((stages) => Object.values(stages).flatMap((entry) => Object.keys(entry.parameters)))]);

  // A label's refusal, in Python's words (toyrl.variants.LABEL_MESSAGES), its names given.
  const sayLabel = (message, given) => say(LABELS.messages[message], (name) => given[name]);

  function checkLabel(label) {
    if (!(label.length > 0 && label.length <= LABELS.max && /\p{L}/u.test(label[0]) && [...label].every((ch) => LABELS.characters.includes(ch)))) fail(sayLabel("form", { label, form: LABELS.form }));
    if (PRESETS.has(label) || LABELS.taken.includes(label)) fail(sayLabel("taken", { label }));
    if (SPEC_KEYS.has(label)) fail(sayLabel("spec_key", { label }));
    return label;
  }

  function splitLabel(text) { // [label or null, the variant's text without it], as _split_label
    const key = (part) => part.split("=")[0].trim(), value = (part) => part.slice(part.indexOf("=") + 1).trim();
    let parts = text.split(",");
    const labels = parts.filter((part) => part.includes("=") && key(part) === "label").map(value);
    if (labels.length) text = parts.filter((part) => !(part.includes("=") && key(part) === "label")).join(",");
    const at = text.indexOf("=");
    if (at >= 0 && !SPEC_KEYS.has(text.slice(0, at).trim())) {
      const rest = text.slice(at + 1);
      if (rest.split(",")[0].includes("=") || PRESETS.has(rest.trim())) {
        labels.push(text.slice(0, at).trim());
        text = rest;
      }
    }
    if (labels.length > 1) fail(sayLabel("labels", { text, count: labels.length, labels: labels.join(", ") }));
    if (labels.length && !text.trim()) fail(sayLabel("no_variant", { label: labels[0] }));
    return labels.length ? [labels[0], text.trim()] : [null, text];
  }

  function resolve(variant) {
    if (typeof variant === "string") {
      const [label, text] = splitLabel(variant);
      if (label !== null) {
        const resolved = resolve(text);
        return { ...resolved, name: checkLabel(label) };
      }
    }
    let name = null, spec = variant;
    if (typeof variant === "string") {
      if (PRESETS.has(variant)) ({ name, spec } = PRESETS.get(variant));
      else if (variant.includes("=")) spec = parseSpecText(variant);
      else fail(`unknown variant ${JSON.stringify(variant)}; valid: ${[...PRESETS.keys()].join(", ")}, or a spec key=value,...`);
    }
    if (spec === null || typeof spec !== "object" || Array.isArray(spec)) fail(`a variant must be a name or a spec object (got ${JSON.stringify(variant)})`);
    const chosen = Object.fromEntries(DATA.kinds.map((kind) => [kind.name, kind.default]));
    if ("mask_truncated" in spec && "selector" in spec) fail(sayKey("mask_and_selector"));
    if ("mask_truncated" in spec) {
      if (typeof spec.mask_truncated !== "boolean") fail(sayKey("mask_truncated", { value: spec.mask_truncated }));
      chosen.selector = spec.mask_truncated ? "stopped" : "all";
    }
    for (const [key, kind] of Object.entries(KIND_KEYS)) {
      if (!(key in spec)) continue;
      if (!Object.hasOwn(REGISTRY[kind], spec[key])) {
        const hint = String(spec[key]).startsWith("custom:") ? sayKey("plugin_hint") : "";
        fail(sayKey("not_registered", { key, names: Object.keys(REGISTRY[kind]).join(", "), value: spec[key], hint }));
      }
      chosen[kind] = spec[key];
    }
    const stages = {};
    for (const [kind, stageName] of Object.entries(chosen)) {
      const entry = REGISTRY[kind][stageName];
      stages[kind] = { name: stageName, class: entry.class, ...entry.fixed, ...entry.parameters, simulated_only: entry.simulated_only };
    }
    for (const [key, value] of Object.entries(spec)) {
      if (key in KIND_KEYS || key === "mask_truncated") continue;
      const owner = Object.keys(stages).find((kind) => key in REGISTRY[kind][chosen[kind]].parameters);
      if (owner === undefined) { // as toyrl.objective._owner: the keys of the stages chosen, and where the key is
        const valid = new Set([...Object.keys(KIND_KEYS), "mask_truncated", ...Object.keys(stages).flatMap((kind) => Object.keys(REGISTRY[kind][chosen[kind]].parameters))]);
        const names = Object.entries(KIND_KEYS).map(([k, kind]) => `${k}=${chosen[kind]}`).join(", ");
        const where = SPEC_KEYS.has(key) && key !== "label" && key !== "eps" ? sayKey("not_a_parameter", { names }) : "";
        fail(sayKey("unknown_key", { key, where, valid: [...valid].join(", ") }));
      }
      stages[owner][key] = value;
    }
    checkParameters(stages);
    if (name === null) {
      const text = Object.entries(spec).map(([k, v]) => `${k}=${v}`).join(",");
      name = [...PRESETS.values()].find((p) => sameSpec(p.spec, spec))?.name ?? text;
    }
    return { name, spec, stages };
  }

  /* The variants without repeats; two of different specs under one name (a label) refused, as
     toyrl.variants.distinct refuses them (each spec named as given, not in Python's canonical text). */
  function distinct(variants) {
    const chosen = new Map(), text = (spec) => Object.entries(spec).map(([k, x]) => `${k}=${x}`).join(",");
    for (const v of variants) {
      const known = chosen.get(v.name);
      if (known && !sameSpec(known.spec, v.spec)) fail(sayLabel("named_twice", { name: v.name, first: text(known.spec), second: text(v.spec) }));
      chosen.set(v.name, v);
    }
    return [...chosen.values()];
  }

  function sameSpec(a, b) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k]);
  }

  /* Whether a parameter's value is valid by its rule as Python declares it (toyrl.stages.declared,
     shipped in the registry's `declared`: kind, bounds, optional, choices, requirement). */
  function fits(v, rule) {
    if (v === null) return rule.optional;
    if (rule.kind === "boolean") return typeof v === "boolean";
    if (rule.kind === "choice") return rule.choices.includes(v);
    if (typeof v !== "number" || !Number.isFinite(v) || (rule.kind === "integer" && !Number.isInteger(v))) return false;
    const above = rule.low_open ? v > rule.low : v >= rule.low, below = rule.high_open ? v < rule.high : v <= rule.high;
    return above && below;
  }

  // A value as Python's repr shows it in toyrl's errors ('text', True, None, numbers as they are).
  const pythonRepr = (v) => (typeof v === "string" ? `'${v}'` : v === true ? "True" : v === false ? "False" : v === null ? "None" : JSON.stringify(v));

  // A value in a refusal's words as Python's str shows it (True/False/None; numbers as they are).
  const shownValue = (v) => (v === true ? "True" : v === false ? "False" : v === null ? "None" : String(v));

  function checkParameters(stages) {
    for (const [kind, stage] of Object.entries(stages)) {
      for (const [key, rule] of Object.entries(REGISTRY[kind][stage.name].declared)) {
        if (stage[key] !== undefined && !fits(stage[key], rule)) fail(`${key} ${rule.requirement} (got ${pythonRepr(stage[key])})`);
      }
    }
    // the combinations of its parameters a stage refuses (toyrl.stages.registry.check_declared)
    for (const [kind, stage] of Object.entries(stages)) {
      const entry = REGISTRY[kind][stage.name];
      const message = refusedBy(entry.refuses, (field) => stage[field] ?? entry.parameters[field] ?? entry.fixed[field] ?? null);
      if (message) fail(message);
    }
  }

  /* Refusals declared once in Python as data (toyrl.refusals): a condition's tree, evaluated with
     Python's operators on value(name) (`valueOf`), and a message's parts, formatted as Python does
     (its value as str shows it, !r as repr, :, with digits grouped). Numbers here are whole and
     positive where they meet // or %, on which JavaScript and Python agree then. */
  const OPERATIONS = {
    "+": (a, b) => a + b, "-": (a, b) => a - b, "*": (a, b) => a * b, "//": (a, b) => (a - (a % b)) / b, "%": (a, b) => a % b,
    "==": (a, b) => a === b, "!=": (a, b) => a !== b, "<": (a, b) => a < b, "<=": (a, b) => a <= b, ">": (a, b) => a > b, ">=": (a, b) => a >= b,
    "in": (a, b) => b.includes(a), "not in": (a, b) => !b.includes(a),
  };
  function evaluate(node, value) {
    const [head, ...operands] = node;
    if (head === "name") return value(operands[0]);
    if (head === "value") return operands[0];
    if (head === "and") return operands.every((operand) => evaluate(operand, value));
    if (head === "or") return operands.some((operand) => evaluate(operand, value));
    if (head === "not") return !evaluate(operands[0], value);
    return OPERATIONS[head](evaluate(operands[0], value), evaluate(operands[1], value));
  }
  const shownAs = (v, conversion, spec) => (conversion === "r" ? pythonRepr(v) : spec === "," ? v.toLocaleString("en") : shownValue(v));
  const say = (parts, value) => parts.map(([text, node, conversion, spec]) => text + (node === null ? "" : shownAs(evaluate(node, value), conversion, spec))).join("");
  const says = (refusal, value) => say(refusal.message, value);
  const firstRefused = (refusals, value) => refusals.find((refusal) => evaluate(refusal.when, value));
  const refusedBy = (refusals, value) => { const refusal = firstRefused(refusals, value); return refusal ? says(refusal, value) : ""; };

  /* value(name) for a refusal, as toyrl.refusals.values gives it: `computed`'s, a kind's registered
     name, `kind.field` of its stage, or the configuration's field; null for a name none has. */
  const valueOf = (c, stages, computed = {}) => (name) => {
    if (name in computed) return computed[name];
    if (name in stages) return stages[name].name;
    const at = name.indexOf(".");
    if (at >= 0) return stages[name.slice(0, at)]?.[name.slice(at + 1)] ?? null;
    return c[name] ?? null;
  };

  /* What toyrl.train.check_variant refuses of a variant in a configuration, in its words, '' if
     nothing: each stage's `check` (its `checks`), in step order, then the variant's own, on the
     layout's work (`layoutTries`, toyrl.train.layout_work's arithmetic). */
  function variantRefused(v, c) {
    for (const [kind, stage] of Object.entries(v.stages)) {
      const message = refusedBy(REGISTRY[kind][stage.name].checks, valueOf(c, { [kind]: stage }));
      if (message) return message;
    }
    const schedule = v.stages.schedule, ranks = schedule.ranks ?? 1;
    const share = Math.floor(Math.floor((c.batch_prompts * c.group_size) / ranks) / (schedule.mini_batches ?? 1));
    return refusedBy(DATA.refusals.variant, valueOf(c, v.stages, { share, merges: layoutTries(v, c) * share * ranks }));
  }

  /* '' if the page trains the variant (sampled, or mean-field), else why not. */
  function support(variant, meanField) {
    const { stages } = typeof variant === "object" && variant.stages ? variant : resolve(variant);
    for (const kind of Object.keys(PORTS)) { // a stage without a twin (a plugin's) is not in the page
      if (!(stages[kind].class in PORTS[kind])) return `the ${kind} ${stages[kind].name} is not in the page`;
    }
    if (!meanField) return "";
    const exact = (reason) => `no exact expected update: ${reason}`;
    for (const [kind, stage] of Object.entries(stages)) { // in step order, as toyrl.expected.exact_support
      const entry = REGISTRY[kind][stage.name]; // a reason by its parameters (`simulated_when`), or one of its own
      const reason = entry.simulated_when.length ? refusedBy(entry.simulated_when, valueOf({}, { [kind]: stage })) : entry.simulated_only;
      if (reason) return exact(reason);
    }
    if (!twin("advantage", stages.advantage).conditional) return exact(`advantage=${stages.advantage.name}`);
    return "";
  }

  // --- the stages of a step, on one run's batch ----------------------------------------------------
  // A batch: B prompts x G responses, flat arrays of length B G (prompt-major, as [B, G] in Python).

  // Each Python stage class (toyrl.stages) has one twin here, registered by
  // port(kind, its class's name, {its methods}): the methods of the class that the page calls, under
  // the class's names (its sampled form and its exact hook), each given the stage first (the variant's
  // entry of the registry: its fields and parameters). The simulator calls a stage through its twin
  // only, PORTS[kind][stage.class]; tests/test_ported.py fails when a Python stage class has no twin
  // or a twin no class.
  const PORTS = Object.fromEntries(DATA.kinds.map((kind) => [kind.name, {}])); // by kind, in step order
  function port(kind, pythonClass, methods) {
    if (!(kind in PORTS)) throw new Error(`no stage kind ${kind}: the kinds are ${Object.keys(PORTS).join(", ")}`);
    if (pythonClass in PORTS[kind]) throw new Error(`the ${kind} ${pythonClass} is ported twice`);
    PORTS[kind][pythonClass] = methods;
  }
  const twin = (kind, stage) => PORTS[kind][stage.class];

  function correctness(batch, c) {
    const out = new Float64Array(batch.length.length), minLength = c.min_length;
    for (let i = 0; i < out.length; i++) out[i] = batch.right[i] && batch.stopped[i] && batch.length[i] >= minLength ? 1 : 0;
    return out;
  }

  function tokenCount(batch, approachTokens) {
    const out = new Float64Array(batch.length.length);
    for (let i = 0; i < out.length; i++) out[i] = batch.length[i] + approachTokens;
    return out;
  }

  // Rewards (toyrl.stages.reward): rewards(stage, batch, c, correct) [N] from the batch and its
  // correctness; exact hook window(stage, c), the ramble lengths on the right approach that earn 1.
  port("reward", "WindowReward", {
    rewards(stage, batch, c, correct) { return correct; },
    window(stage, c) { return [c.min_length, c.cap]; },
  });

  port("reward", "SoftOverlong", { // 1 or `incorrect`, plus min(0, -(|o| - (L_max - b)) / b) penalty_factor
    rewards(stage, batch, c, correct) {
      const longest = c.cap + c.approach_tokens;
      const buffer = stage.buffer * longest;
      const tokens = tokenCount(batch, c.approach_tokens);
      return correct.map((r, i) => (r > 0 ? 1 : stage.incorrect) + Math.min(-(tokens[i] - (longest - buffer)) / buffer * stage.penalty_factor, 0));
    },
  });

  port("reward", "LengthPenalty", { // r - p (w_out |o| / max |o| + w_in + w_turns), p the group's pass rate
    rewards(stage, batch, c, correct) {
      const G = c.group_size, tokens = tokenCount(batch, c.approach_tokens), out = new Float64Array(correct.length);
      for (let start = 0; start < out.length; start += G) {
        const passRate = sum(correct, start, G) / G;
        let longest = -Infinity;
        for (let i = start; i < start + G; i++) longest = Math.max(longest, tokens[i]);
        for (let i = start; i < start + G; i++) {
          const fraction = stage.num_output_tokens_weight * (tokens[i] / longest) + stage.num_input_tokens_weight + stage.num_turns_weight;
          out[i] = correct[i] - passRate * fraction;
        }
      }
      return out;
    },
  });

  port("reward", "GroupRelativeRescaling", { // r / (1 + alpha |o| / group mean |o|)
    rewards(stage, batch, c, correct) {
      const G = c.group_size, tokens = tokenCount(batch, c.approach_tokens), out = new Float64Array(correct.length);
      for (let start = 0; start < out.length; start += G) {
        const mean = sum(tokens, start, G) / G;
        for (let i = start; i < start + G; i++) out[i] = correct[i] / (1 + stage.alpha * (tokens[i] / mean));
      }
      return out;
    },
  });

  // Selectors (toyrl.stages.selector): included(stage, batch, rewards, G), 1 for the responses in the
  // loss [N]; exact hooks keeps_truncated(stage), whether a truncated response is in the loss, and for
  // a selector by its group's rewards keeps_group(stage, successes, G), whether a group of 0/1
  // rewards with `successes` of them 1 is.
  function groupsKept(N, G, keep) { // 1 for each response of a group that keep(its first index) keeps
    const out = new Uint8Array(N).fill(1);
    for (let start = 0; start < N; start += G) if (!keep(start)) out.fill(0, start, start + G);
    return out;
  }

  port("selector", "AllResponses", {
    included(stage, batch, rewards, G) { return new Uint8Array(rewards.length).fill(1); },
    keeps_truncated(stage) { return true; },
  });

  port("selector", "StoppedResponses", {
    included(stage, batch, rewards, G) { return batch.stopped; },
    keeps_truncated(stage) { return false; },
  });

  port("selector", "GroupMeanWithin", { // mean reward in (low, high); with drop_truncated, the stopped ones of those
    included(stage, batch, rewards, G) {
      const N = rewards.length, out = groupsKept(N, G, (start) => this.keeps_group(stage, sum(rewards, start, G), G));
      if (stage.drop_truncated) for (let i = 0; i < N; i++) out[i] = out[i] && batch.stopped[i] ? 1 : 0;
      return out;
    },
    keeps_truncated(stage) { return !stage.drop_truncated; },
    keeps_group(stage, successes, G) {
      const mean = successes / G;
      return mean > stage.low && mean < stage.high;
    },
  });

  port("selector", "RewardSpread", { // a spread max - min above tol
    included(stage, batch, rewards, G) {
      return groupsKept(rewards.length, G, (start) => {
        let highest = -Infinity, lowest = Infinity;
        for (let i = start; i < start + G; i++) { highest = Math.max(highest, rewards[i]); lowest = Math.min(lowest, rewards[i]); }
        return highest - lowest > stage.tol;
      });
    },
    keeps_truncated(stage) { return true; },
    keeps_group(stage, successes, G) { return (successes > 0 && successes < G ? 1 : 0) > stage.tol; },
  });

  // Advantages (toyrl.stages.advantage): advantages(stage, rewards, c, G, tokens) [N]; exact hook
  // conditional(stage, r, others, G, eps), E[A_1 | r_1 = r, `others` of the other G - 1 correct].
  const stdEps = (stage, c) => (stage.std_eps === undefined || stage.std_eps === null ? c.std_eps : stage.std_eps); // std_eps_of

  /* NeMo-RL's leave-one-out advantage over its std (toyrl.stages.advantage._loo_scaled): (r - b) / (s + eps)
     where s > 0, else r - b; `spread` the others' mean square less their mean squared, s its sample std
     (NaN, from a negative spread or G = 2, is 0). */
  function looScaled(centred, spread, others, eps) {
    if (others < 2) return centred;
    const std = Math.sqrt(spread * (others / (others - 1)));
    return std > 0 ? centred / (std + eps) : centred;
  }

  function groupCentred(rewards, G) {
    const out = new Float64Array(rewards.length);
    for (let start = 0; start < rewards.length; start += G) {
      const mean = sum(rewards, start, G) / G;
      for (let i = start; i < start + G; i++) out[i] = rewards[i] - mean;
    }
    return out;
  }

  function scaled(centred, scale, eps) { // toyrl.stages._scaled, one scale for these values
    const out = new Float64Array(centred.length);
    if (eps > 0 || scale > 0) for (let i = 0; i < out.length; i++) out[i] = centred[i] / scale;
    return out;
  }

  function sampleStd(values, ddof) { // numpy's std: the mean, then the mean square about it
    const mean = sum(values) / values.length;
    return Math.sqrt(sum(values.map((v) => (v - mean) * (v - mean))) / (values.length - ddof));
  }

  // AReaL's adv_norm at batch levels (toyrl.stages.advantage._token_whitened): (a - m) / (std + eps)
  // over the batch's tokens, std Bessel-corrected
  function arealWhitened(values, tokens, eps) {
    const total = sum(tokens);
    const mean = sum(values.map((a, i) => a * tokens[i])) / total;
    const shifted = values.map((a) => a - mean);
    return scaled(shifted, Math.sqrt(sum(shifted.map((a, i) => a * a * tokens[i])) / (total - 1)) + eps, eps);
  }

  // centred / (the group's std, ddof `ddof`, + eps), group by group (GroupStd's)
  function groupStdScaled(centred, G, ddof, eps) {
    const N = centred.length, out = new Float64Array(N), squares = new Float64Array(G);
    for (let start = 0; start < N; start += G) {
      for (let g = 0; g < G; g++) squares[g] = centred[start + g] * centred[start + g];
      const scale = Math.sqrt(sum(squares) / (G - ddof)) + eps;
      for (let i = start; i < start + G; i++) out[i] = eps > 0 || scale > 0 ? centred[i] / scale : 0;
    }
    return out;
  }

  port("advantage", "GroupStd", {
    advantages(stage, rewards, c, G, tokens) { return groupStdScaled(groupCentred(rewards, G), G, stage.ddof, stdEps(stage, c)); },
    conditional(stage, r, others, G, eps) {
      const k = r + others;
      let std = Math.sqrt(k / G * (1 - k / G));
      if (stage.ddof === 1) std = std * Math.sqrt(G / (G - 1));
      const scale = std + eps;
      return scale > 0 ? (r - k / G) / scale : 0;
    },
  });

  port("advantage", "BatchStd", {
    advantages(stage, rewards, c, G, tokens) {
      const eps = stdEps(stage, c);
      return scaled(groupCentred(rewards, G), sampleStd(rewards, 1) + eps, eps);
    },
  });

  port("advantage", "Centred", {
    advantages(stage, rewards, c, G, tokens) { return groupCentred(rewards, G); },
    conditional(stage, r, others, G, eps) { return r - (r + others) / G; },
  });

  port("advantage", "LeaveOneOut", {
    advantages(stage, rewards, c, G, tokens) {
      const out = new Float64Array(rewards.length);
      for (let start = 0; start < rewards.length; start += G) {
        const total = sum(rewards, start, G);
        for (let i = start; i < start + G; i++) out[i] = rewards[i] - (total - rewards[i]) / (G - 1);
      }
      return out;
    },
    conditional(stage, r, others, G, eps) { return r - others / (G - 1); },
  });

  port("advantage", "LeaveOneOutStd", {
    advantages(stage, rewards, c, G, tokens) { // the others' sums: the group's less the response's own
      const eps = stdEps(stage, c), out = new Float64Array(rewards.length), squares = rewards.map((r) => r * r), others = G - 1;
      for (let start = 0; start < rewards.length; start += G) {
        const total = sum(rewards, start, G), totalSquares = sum(squares, start, G);
        for (let i = start; i < start + G; i++) {
          const baseline = (total - rewards[i]) / others;
          const squareMean = (totalSquares - squares[i]) / others;
          out[i] = looScaled(rewards[i] - baseline, squareMean - baseline * baseline, others, eps);
        }
      }
      return out;
    },
    conditional(stage, r, others, G, eps) { // 0/1 rewards: the others' squares sum to their successes
      const baseline = others / (G - 1);
      return looScaled(r - baseline, baseline - baseline * baseline, G - 1, eps);
    },
  });

  port("advantage", "BatchWhiten", {
    advantages(stage, rewards, c, G, tokens) {
      const eps = stdEps(stage, c), centred = groupCentred(rewards, G);
      const mean = sum(centred) / rewards.length;
      const shifted = centred.map((a) => a - mean);
      return scaled(shifted, sampleStd(shifted, 1) + eps, eps);
    },
  });

  port("advantage", "TokenWhiten", {
    advantages(stage, rewards, c, G, tokens) {
      const base = stage.centred ? groupCentred(rewards, G) : rewards;
      const total = sum(tokens);
      const mean = sum(base.map((a, i) => a * tokens[i])) / total;
      const shifted = base.map((a) => a - mean);
      const squares = sum(shifted.map((a, i) => a * a * tokens[i]));
      // verl's Bessel factor n / (n - 1) is a float32 division of the token counts
      const variance = stage.float32_bessel
        ? squares / total * Math.fround(Math.fround(total) / Math.fround(total - 1))
        : squares / (total - stage.ddof);
      const root = Math.sqrt(Math.max(variance + stage.var_eps, stage.var_floor));
      return shifted.map((a) => a / root);
    },
  });

  port("advantage", "ArealWhiten", {
    advantages(stage, rewards, c, G, tokens) { return arealWhitened(stage.centred ? groupCentred(rewards, G) : rewards, tokens, stage.whiten_eps); },
  });

  port("advantage", "ArealScaledWhiten", { // c / (the group's or the batch's sample std + eps), then the whitening
    advantages(stage, rewards, c, G, tokens) {
      const eps = stdEps(stage, c), centred = groupCentred(rewards, G);
      const scaledCentred = stage.scale === "group" // GroupStd's sample std, the same operations
        ? groupStdScaled(centred, G, 1, eps)
        : scaled(centred, Math.sqrt(sum(centred.map((a) => a * a)) / (rewards.length - 1)) + eps, eps);
      return arealWhitened(scaledCentred, tokens, stage.whiten_eps);
    },
  });

  port("advantage", "LengthWeightedBaseline", {
    advantages(stage, rewards, c, G, tokens) {
      const out = new Float64Array(rewards.length);
      for (let start = 0; start < rewards.length; start += G) {
        const weighted = sum(tokens.subarray(start, start + G).map((t, i) => t * rewards[start + i]));
        const total = sum(tokens, start, G);
        for (let i = start; i < start + G; i++) out[i] = rewards[i] - weighted / total;
      }
      return out;
    },
  });

  port("advantage", "RescaledCentred", {
    advantages(stage, rewards, c, G, tokens) {
      const N = rewards.length, nonzero = Math.max(rewards.reduce((n, r) => n + (r !== 0 ? 1 : 0), 0), 1);
      return groupCentred(rewards, G).map((a) => N / nonzero * a);
    },
  });

  port("advantage", "BestOverSecond", {
    advantages(stage, rewards, c, G, tokens) { // the first best response: (r_max - r_second) / (sample std + eps)
      const eps = stdEps(stage, c), N = rewards.length, centred = groupCentred(rewards, G), out = new Float64Array(N), squares = new Float64Array(G);
      for (let start = 0; start < N; start += G) {
        let best = start;
        for (let i = start + 1; i < start + G; i++) if (rewards[i] > rewards[best]) best = i;
        let second = -Infinity;
        for (let i = start; i < start + G; i++) if (i !== best && rewards[i] > second) second = rewards[i];
        let margin = rewards[best] - second;
        if (stage.std_scaled) {
          for (let g = 0; g < G; g++) squares[g] = centred[start + g] * centred[start + g];
          const scale = Math.sqrt(sum(squares) / (G - 1)) + eps;
          margin = eps > 0 || scale > 0 ? margin / scale : 0;
        }
        out[best] = margin;
      }
      return out;
    },
    conditional(stage, r, others, G, eps) { // the group's one success: a margin of 1
      const alone = others === 0 ? r : 0;
      if (!stage.std_scaled) return alone;
      const k = r + others;
      const scale = Math.sqrt(k / G * (1 - k / G)) * Math.sqrt(G / (G - 1)) + eps;
      return scale > 0 ? alone / scale : 0;
    },
  });

  port("advantage", "MeanScaled", { // (r - mu) / mu, mu the group's mean reward; 0 where mu <= 0
    advantages(stage, rewards, c, G, tokens) {
      const out = new Float64Array(rewards.length);
      for (let start = 0; start < rewards.length; start += G) {
        const mean = sum(rewards, start, G) / G;
        if (mean > 0) for (let i = start; i < start + G; i++) out[i] = (rewards[i] - mean) / mean;
      }
      return out;
    },
    conditional(stage, r, others, G, eps) {
      const mean = (r + others) / G;
      return mean > 0 ? (r - mean) / mean : 0;
    },
  });

  // Normalisers (toyrl.stages.normaliser): denominators(stage, tokens, included, c, members), (D [N], n)
  // over the responses `included` among `members` (one update's part; null: the whole batch); for a
  // per_micro_batch one, micro_denominators(stage, tokens, included, c, members, micro), D [N] of each
  // of `members` from its micro-batch (`micro`: each one's index); exact hook
  // response_denominator(stage, tokens, lengthNorm), D of one response of `tokens` tokens.
  const memberCount = (tokens, members) => (members ? sum(members) : tokens.length);

  function byMicroBatch(values, members, micro, reduce) { // reduce of `values` over each member's micro-batch (_by_micro_batch)
    const totals = new Float64Array(micro.reduce((a, m) => Math.max(a, m), 0) + 1);
    for (let i = 0; i < values.length; i++) if (members[i]) totals[micro[i]] = reduce(totals[micro[i]], values[i]);
    return Float64Array.from(micro, (m, i) => (members[i] ? totals[m] : 0));
  }

  port("normaliser", "PerResponse", { // |o_i|, L_norm or 1; n the responses (averaged) or 1
    denominators(stage, tokens, included, c, members) {
      const D = tokens.map((t) => this.response_denominator(stage, t, c.length_norm_value));
      return [D, stage.averaged ? memberCount(tokens, members) : 1];
    },
    micro_denominators(stage, tokens, included, c, members, micro) {
      return tokens.map((t) => this.response_denominator(stage, t, c.length_norm_value));
    },
    response_denominator(stage, tokens, lengthNorm) { return stage.by_tokens ? tokens : stage.by_length_norm ? lengthNorm : 1; },
  });

  port("normaliser", "TokenMean", { // the tokens in the loss among `members`, n = 1
    denominators(stage, tokens, included, c, members) {
      let total = 0;
      for (let i = 0; i < tokens.length; i++) if (included[i] && (!members || members[i])) total += tokens[i];
      return [new Float64Array(tokens.length).fill(total), 1];
    },
    micro_denominators(stage, tokens, included, c, members, micro) {
      return byMicroBatch(tokens.map((t, i) => (included[i] ? t : 0)), members, micro, (a, b) => a + b);
    },
  });

  port("normaliser", "LengthPower", { // |o_i|^(1 - alpha) L_norm^alpha
    denominators(stage, tokens, included, c, members) {
      return [tokens.map((t) => this.response_denominator(stage, t, c.length_norm_value)), memberCount(tokens, members)];
    },
    response_denominator(stage, tokens, lengthNorm) { return K.power(tokens, 1 - stage.alpha) * K.power(lengthNorm, stage.alpha); },
  });

  port("normaliser", "LongestResponse", { // the longest response of `members` (null: the batch)
    denominators(stage, tokens, included, c, members) {
      let longest = 0;
      for (let i = 0; i < tokens.length; i++) longest = Math.max(longest, !members || members[i] ? tokens[i] : 0);
      return [new Float64Array(tokens.length).fill(longest), memberCount(tokens, members)];
    },
    micro_denominators(stage, tokens, included, c, members, micro) { return byMicroBatch(tokens, members, micro, Math.max); },
  });

  port("normaliser", "PromptMean", { // the group's tokens in the loss (at least 1), n the prompts among `members`
    denominators(stage, tokens, included, c, members) {
      const G = c.group_size, N = tokens.length, D = new Float64Array(N), counted = new Float64Array(G);
      let prompts = 0;
      for (let start = 0; start < N; start += G) {
        let member = !members;
        for (let g = 0; g < G; g++) {
          const i = start + g, inside = !members || members[i];
          counted[g] = included[i] && inside ? tokens[i] : 0;
          if (inside) member = true;
        }
        D.fill(Math.max(sum(counted), 1), start, start + G);
        if (member) prompts += 1;
      }
      return [D, prompts];
    },
  });

  port("normaliser", "DeltaL", { // L_norm |o_i|^alpha mean_j |o_j|^-alpha, the mean over the sampled batch
    denominators(stage, tokens, included, c, members) {
      const inverse = tokens.map((t) => K.power(t, -stage.alpha));
      const mean = sum(inverse) / tokens.length;
      return [inverse.map((v) => c.length_norm_value * mean / v), memberCount(tokens, members)];
    },
  });

  function both(a, b) { // a & b, elementwise
    const out = new Uint8Array(a.length);
    for (let i = 0; i < out.length; i++) out[i] = a[i] && b[i] ? 1 : 0;
    return out;
  }

  // --- verl's V1 layout (toyrl.layout): the largest differencing method, with verl's order of ties.
  // Workloads 24576 s + s^2 are integers; their sums are exact as Numbers below 2^53, else BigInts.

  const workload = (s) => 24576 * s + s * s;
  const workloadBig = (s) => 24576n * BigInt(s) + BigInt(s) * BigInt(s);

  // A part: { sum, items } (items: the indices in the order added), compared as verl's Set is (its
  // (index, value) items compare as their indices: an index has one value). A state keeps its
  // non-empty parts only, ascending: its other parts are empty, the smallest of all (toyrl.layout).
  function compareParts(a, b) { // Python's (sum, len(items), items) order
    if (a.sum !== b.sum) return a.sum < b.sum ? -1 : 1;
    if (a.items.length !== b.items.length) return a.items.length - b.items.length;
    for (let i = 0; i < a.items.length; i++) if (a.items[i] !== b.items[i]) return a.items[i] - b.items[i];
    return 0;
  }

  function makeState(parts, k, zero) { // the heap's keys: the spread, the largest part
    const largest = parts[parts.length - 1];
    return { parts, largest, spread: largest.sum - (parts.length === k ? parts[0].sum : zero) };
  }

  function stateBefore(a, b) { // the heap pops the largest spread, then the larger largest part
    if (a.spread !== b.spread) return a.spread > b.spread;
    return compareParts(a.largest, b.largest) > 0;
  }

  function heapPush(heap, state) {
    heap.push(state);
    for (let i = heap.length - 1; i > 0; ) {
      const up = (i - 1) >> 1;
      if (!stateBefore(heap[i], heap[up])) break;
      [heap[i], heap[up]] = [heap[up], heap[i]];
      i = up;
    }
  }

  function heapPop(heap) {
    const top = heap[0], last = heap.pop();
    if (heap.length) {
      heap[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1, r = l + 1;
        let best = i;
        if (l < heap.length && stateBefore(heap[l], heap[best])) best = l;
        if (r < heap.length && stateBefore(heap[r], heap[best])) best = r;
        if (best === i) break;
        [heap[i], heap[best]] = [heap[best], heap[i]];
        i = best;
      }
    }
    return top;
  }

  /* verl's State.merge (toyrl.layout._merged): the first's i-th largest part joined with the
     second's i-th smallest; only the parts that meet a non-empty one change. */
  function mergedParts(first, second, k) {
    const paired = Math.max(0, first.length + second.length - k), joined = [];
    for (let j = 0; j < paired; j++) {
      const a = first[paired - 1 - j], b = second[j];
      for (const index of b.items) a.items.push(index); // a state's parts are its own
      joined.push({ sum: a.sum + b.sum, items: a.items });
    }
    let kept = first.slice(paired), added = second.slice(paired);
    if (added.length > kept.length) [kept, added] = [added, kept];
    for (const part of joined) added.push(part);
    if (8 * added.length < kept.length) {
      for (const part of added) { // after any equal part, as Python's insort
        let lo = 0, hi = kept.length;
        while (lo < hi) { const mid = (lo + hi) >> 1; if (compareParts(part, kept[mid]) < 0) hi = mid; else lo = mid + 1; }
        kept.splice(lo, 0, part);
      }
    } else {
      for (const part of added) kept.push(part);
      kept.sort(compareParts);
    }
    return kept;
  }

  /* The indices of `seqLens`' sequences in k parts of balanced workloads, each ascending
     (toyrl.layout.balanced_partitions, verl's get_seqlen_balanced_partitions). */
  function balancedPartitions(seqLens, k, equalSize) {
    const total = seqLens.reduce((a, s) => a + workloadBig(s), 0n);
    const values = total <= BigInt(Number.MAX_SAFE_INTEGER) ? seqLens.map(workload) : seqLens.map(workloadBig);
    const zero = typeof values[0] === "bigint" ? 0n : 0;
    const ranked = values.map((value, index) => [value, index]).sort((a, b) => (a[0] !== b[0] ? (a[0] < b[0] ? -1 : 1) : a[1] - b[1]));
    const heap = [];
    if (equalSize) {
      for (let offset = 0; offset < ranked.length; offset += k) {
        heapPush(heap, makeState(ranked.slice(offset, offset + k).map(([value, index]) => ({ sum: value, items: [index] })), k, zero));
      }
    } else {
      for (const [value, index] of ranked) heapPush(heap, makeState([{ sum: value, items: [index] }], k, zero));
    }
    while (heap.length > 1) {
      const first = heapPop(heap).parts, second = heapPop(heap).parts;
      heapPush(heap, makeState(mergedParts(first, second, k), k, zero));
    }
    const parts = heap[0].parts.map((part) => part.items.slice().sort((a, b) => a - b)).reverse();
    while (parts.length < k) parts.push([]);
    return parts;
  }

  /* A lower bound on the parts of at most `budget` tokens a share's sequences cut into: Martello
     and Toth's L2 (toyrl.layout.fewest_parts). */
  function fewestParts(share, budget) {
    const sizes = Float64Array.from(share).sort(), n = sizes.length, below = new Float64Array(n + 1);
    for (let i = 0; i < n; i++) below[i + 1] = below[i] + sizes[i];
    const search = (x, right) => { // numpy's searchsorted
      let lo = 0, hi = n;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (right ? sizes[mid] <= x : sizes[mid] < x) lo = mid + 1; else hi = mid; }
      return lo;
    };
    const half = search(Math.floor(budget / 2), true), big = n - half;
    let fewest = 1;
    for (let t = -1; t < half; t++) { // the thresholds: 0 and each size up to budget / 2
      const threshold = t < 0 ? 0 : sizes[t], start = search(threshold, false), alone = search(budget - threshold, true);
      const room = (alone - half) * budget - (below[alone] - below[half]), small = below[half] - below[start];
      fewest = Math.max(fewest, big + Math.max(0, Math.ceil((small - room) / budget)));
    }
    return fewest;
  }

  /* Each rank's micro-batches of its share of a mini-batch (toyrl.layout.token_budget_parts). */
  function tokenBudgetParts(shares, budget) {
    let count = Math.max(...shares.map((share) => fewestParts(share, budget)));
    for (;;) {
      const layout = shares.map((share) => balancedPartitions(share, count, false));
      const fits = layout.every((parts, q) => parts.every((part) => part.reduce((total, i) => total + shares[q][i], 0) <= budget));
      if (fits) return layout;
      count += 1;
    }
  }

  /* Which responses are in update `update`'s mini-batch, and each one's micro-batch in it
     (toyrl.train.Plan.parts): the update's part of the run's order of the responses (`positions`,
     one order per epoch; null: the batch's own order), cut into consecutive micro-batches; with
     ranks or a token budget, verl's V1 layout of the tokens (`Plan._laid_out`). */
  function partsOf(update, positions, schedule, N, tokens, budgeted) {
    const mini = schedule.mini_batches ?? 1, microCount = schedule.micro_batches ?? 1;
    const size = N / mini, microSize = size / microCount; // whole numbers: the schedule's check
    const order = positions ? positions[Math.min(Math.floor(update / mini), positions.length - 1)] : null;
    const members = new Uint8Array(N), micro = new Int32Array(N);
    const ranks = schedule.ranks ?? 1, budget = budgeted ? schedule.token_budget : 0;
    if (ranks > 1 || budget > 0) {
      const seq = Array.from(tokens, (t) => t + (schedule.prompt_tokens ?? 0));
      const byPosition = Array.from({ length: N }, (_, i) => i);
      if (order) byPosition.sort((a, b) => order[a] - order[b]);
      const dealt = ranks > 1 ? balancedPartitions(byPosition.map((i) => seq[i]), ranks, true).flat().map((j) => byPosition[j]) : byPosition;
      const share = N / ranks / mini;
      const shares = Array.from({ length: ranks }, (_, q) => dealt.slice((q * mini + (update % mini)) * share, (q * mini + (update % mini) + 1) * share));
      let layout, count;
      if (budget > 0) {
        layout = tokenBudgetParts(shares.map((indices) => indices.map((i) => seq[i])), budget);
        count = layout[0].length;
      } else {
        count = microCount;
        const each = share / count;
        layout = shares.map(() => Array.from({ length: count }, (_, m) => Array.from({ length: each }, (_, j) => m * each + j)));
      }
      shares.forEach((indices, q) => {
        for (const i of indices) members[i] = 1;
        layout[q].forEach((part, m) => { for (const j of part) micro[indices[j]] = q * count + m; });
      });
      return { members, micro, laidOut: true };
    }
    for (let i = 0; i < N; i++) {
      const p = order ? order[i] : i;
      members[i] = Math.floor(p / size) === update % mini ? 1 : 0;
      micro[i] = Math.floor((p % size) / microSize);
    }
    return { members, micro, laidOut: false };
  }

  /* (D, n) of one update's part (toyrl.stages.normaliser.part_denominators): a per_micro_batch
     normaliser on each micro-batch (its twin's micro_denominators), its n times their count; a
     batch_tokens one the whole batch's, over the number of mini-batches. */
  function partDenominators(stage, tokens, selected, c, parts, schedule) {
    const normaliser = twin("normaliser", stage);
    if (!parts) return normaliser.denominators(stage, tokens, selected, c, null);
    const { members, micro } = parts;
    const included = both(selected, members);
    if (stage.batch_tokens) {
      const [D, n] = normaliser.denominators(stage, tokens, selected, c, null);
      return [D.map((d) => d / (schedule.mini_batches ?? 1)), n];
    }
    if (!stage.per_micro_batch) return normaliser.denominators(stage, tokens, included, c, members);
    const own = normaliser.micro_denominators(stage, tokens, included, c, members, micro);
    const D = Float64Array.from(own, (d, i) => (members[i] ? d : 1));
    // micro-batches of unequal sizes: the mini-batch's count (a LongestResponse's n)
    if (parts.laidOut) return [D, normaliser.denominators(stage, tokens, included, c, members)[1]];
    const microCount = schedule.micro_batches ?? 1, first = Uint8Array.from(members, (m, i) => (m && micro[i] === 0 ? 1 : 0));
    return [D, normaliser.denominators(stage, tokens, included, c, first)[1] * microCount];
  }

  /* The responses of one update's loss (toyrl.train.Part): which, D, n, the scale 1/(D n) (0 where
     not in the loss) and the tokens in the loss (every token: the clip fraction's denominator). */
  function partOf(batch, included, D, n) {
    const N = D.length, scale = new Float64Array(N);
    let tokens = 0;
    for (let i = 0; i < N; i++) {
      scale[i] = (included[i] ? (D[i] > 0 ? 1 / D[i] : 0) : 0) / n;
      if (included[i]) tokens += batch.length[i] + 1;
    }
    return { included, D, n, scale, tokens };
  }

  /* G' responses to each of the batch's prompts, by inversion (toyrl.policy.sample_batch): approach
     uniforms and length exponentials [B G'], into `out` when given. */
  function sampleBatch(theta, promptIndex, approach, exponential, cap, width, out) {
    const P = theta.length - 2, B = promptIndex.length, N = B * width;
    const batch = out ?? { right: new Uint8Array(N), length: new Float64Array(N), stopped: new Uint8Array(N) };
    batch.prompt_index = promptIndex;
    const rateRight = softplus(theta[P]), rateWrong = softplus(theta[P + 1]);
    for (let b = 0; b < B; b++) {
      const threshold = expit(theta[promptIndex[b]]);
      for (let g = 0; g < width; g++) {
        const i = b * width + g;
        const right = approach[i] < threshold;
        let rambled = Math.floor(exponential[i] / (right ? rateRight : rateWrong)) + 1;
        rambled = Number.isNaN(rambled) ? cap + 1 : Math.min(rambled, cap + 1); // numpy's fmin drops NaN
        batch.right[i] = right ? 1 : 0; batch.length[i] = Math.min(rambled, cap); batch.stopped[i] = rambled <= cap ? 1 : 0;
      }
    }
    return batch;
  }

  const generated = (batch) => sum(batch.length) + batch.length.length; // every token: L + 1 each

  function argsort(values) {
    return Array.from(values.keys()).sort((a, b) => values[a] - values[b] || a - b);
  }

  // Samplers (toyrl.stages.sampler): batch(stage, drawn, theta, c, refill), [the batch a run trains
  // on, the tokens its sampler generated], from the one drawn with the step's noise (more draws come
  // from the run's refill stream).
  port("sampler", "OneDraw", {
    batch(stage, drawn, theta, c, refill) { return [drawn, generated(drawn)]; },
  });

  port("sampler", "FilterGroups", { // DAPO's dynamic sampling: refill with groups that vary
    batch(stage, drawn, theta, c, refill) {
      const G = c.group_size, B = drawn.prompt_index.length;
      const group = (batch, j) => ({
        prompt: batch.prompt_index[j],
        right: batch.right.slice(j * G, (j + 1) * G),
        length: batch.length.slice(j * G, (j + 1) * G),
        stopped: batch.stopped.slice(j * G, (j + 1) * G),
      });
      const assemble = (groups) => {
        const out = { prompt_index: Int32Array.from(groups, (g) => g.prompt), right: new Uint8Array(B * G), length: new Float64Array(B * G), stopped: new Uint8Array(B * G) };
        groups.forEach((g, j) => { out.right.set(g.right, j * G); out.length.set(g.length, j * G); out.stopped.set(g.stopped, j * G); });
        return out;
      };
      const kept = [], dropped = [], used = new Set(drawn.prompt_index);
      let tokens = generated(drawn), batch = drawn;
      for (let round = 0; round < stage.max_rounds; round++) {
        if (round > 0) {
          const pool = [];
          for (let j = 0; j < c.prompts; j++) if (!used.has(j)) pool.push(j);
          if (pool.length === 0) break;
          const size = Math.min(stage.round_prompts || B, pool.length);
          const choice = Int32Array.from(toyrlRandom.permutationPrefix(refill.random(pool.length), pool.length, size), (k) => pool[k]);
          const approach = refill.random(size * G), exponential = refill.exponential(size * G);
          batch = sampleBatch(theta, choice, approach, exponential, c.cap, G);
          tokens += generated(batch);
          for (const j of choice) used.add(j);
        }
        const correct = correctness(batch, c);
        for (let j = 0; j < batch.prompt_index.length; j++) {
          const successes = sum(correct, j * G, G);
          (successes > 0 && successes < G ? kept : dropped).push(group(batch, j));
        }
        if (kept.length >= B) break;
      }
      return [assemble(kept.concat(dropped).slice(0, B)), tokens];
    },
  });

  port("sampler", "GroupFilter", { // GFPO: G' draws a prompt, the G shortest (or with most reward per token) kept, in draw order
    batch(stage, drawn, theta, c, refill) {
      const G = c.group_size, B = drawn.prompt_index.length, width = stage.draws - G;
      const approach = refill.random(B * width), exponential = refill.exponential(B * width);
      const more = sampleBatch(theta, drawn.prompt_index, approach, exponential, c.cap, width);
      const D = stage.draws, every = { right: new Uint8Array(D), length: new Float64Array(D), stopped: new Uint8Array(D) };
      const out = { prompt_index: drawn.prompt_index, right: new Uint8Array(B * G), length: new Float64Array(B * G), stopped: new Uint8Array(B * G) };
      const count = new Float64Array(D), key = new Float64Array(D);
      let tokens = 0;
      for (let j = 0; j < B; j++) { // the prompt's G drawn responses, then its G' - G more
        for (const name of ["right", "length", "stopped"]) {
          every[name].set(drawn[name].subarray(j * G, (j + 1) * G));
          every[name].set(more[name].subarray(j * width, (j + 1) * width), G);
        }
        const correct = correctness(every, c);
        for (let k = 0; k < D; k++) {
          count[k] = every.length[k] + 1;
          key[k] = stage.keep === "shortest" ? count[k] : -correct[k] / count[k];
        }
        tokens += sum(count);
        const keep = argsort(key).slice(0, G).sort((a, b) => a - b);
        keep.forEach((k, g) => {
          out.right[j * G + g] = every.right[k]; out.length[j * G + g] = every.length[k]; out.stopped[j * G + g] = every.stopped[k];
        });
      }
      return [out, tokens];
    },
  });

  const positiveScore = (x) => (x > SCORE_EXACT_ABOVE ? expit(-x) : 1 - expit(x)); // 1 - sigma(x)

  /* The loss gradient [P + 2] of an on-policy update (toyrl.policy.policy_gradient's closed form):
     every token of response i has the weight w_i; its approach token moves psi_j, its ramble the
     phi of its branch with the summed score 1[stopped] - L s; the sums are divided by n. */
  function onPolicyGradient(theta, batch, weight, n) {
    const P = theta.length - 2, B = batch.prompt_index.length, N = weight.length, G = N / B;
    const stopRight = expit(theta[P]), stopWrong = expit(theta[P + 1]);
    const approach = new Float64Array(N), ramble = new Float64Array(N);
    for (let b = 0; b < B; b++) {
      const j = batch.prompt_index[b], p = expit(theta[j]), positive = positiveScore(theta[j]);
      for (let g = 0; g < G; g++) {
        const i = b * G + g, right = batch.right[i] === 1;
        approach[i] = weight[i] * (right ? positive : -p);
        let score = batch.stopped[i] - batch.length[i] * (right ? stopRight : stopWrong);
        const phi = theta[right ? P : P + 1];
        if (batch.stopped[i] && batch.length[i] === 1 && phi > SCORE_EXACT_ABOVE) score = expit(-phi);
        ramble[i] = weight[i] * score;
      }
    }
    return scatterGradient(theta, batch, approach, ramble, n);
  }

  /* The loss gradient [P + 2] from each response's terms: `approach` [N] on its prompt's psi_j,
     `ramble` [N] on its branch's phi, summed in numpy's order and divided by n (the one scatter of
     both forms, as toyrl.policy.policy_gradient's). */
  function scatterGradient(theta, batch, approach, ramble, n) {
    const P = theta.length - 2, B = batch.prompt_index.length, N = approach.length, G = N / B;
    const grad = new Float64Array(P + 2);
    const rambleRight = new Float64Array(N), rambleWrong = new Float64Array(N);
    for (let i = 0; i < N; i++) (batch.right[i] === 1 ? rambleRight : rambleWrong)[i] = ramble[i]; // 0 in the other branch's sum
    for (let b = 0; b < B; b++) grad[batch.prompt_index[b]] = -sum(approach, b * G, G) / n;
    grad[P] = -sum(rambleRight) / n;
    grad[P + 1] = -sum(rambleWrong) / n;
    return grad;
  }

  /* log sigma(x) and log sigma(-x) of the logits a batch's tokens are on (its prompts' psi_j and the
     two phi): the log-probabilities of each one's two outcomes, by logit index (P: the prompts). */
  function logTables(theta, promptIndex) {
    const P = theta.length - 2, positive = new Map(), negative = new Map();
    for (const x of [...promptIndex, P, P + 1]) { positive.set(x, logExpit(theta[x])); negative.set(x, logExpit(-theta[x])); }
    return { positive, negative, P };
  }

  // Objectives (toyrl.stages.objective): coefficients(stage, ratio, advantage, part, counts, kl, tokens),
  // {coefficient: d objective / d log pi of each response's three kinds of token (approach, non-stop,
  // stop) [3][N] at the ratios `ratio` [3][N], clipped: the tokens clipped}. `kl`: the KL term's
  // coefficient on each token of a kind [3][N] (k3: beta (pi_ref / pi - 1)), or null; `tokens`:
  // per-token advantages summed per kind and sign (a KL reward's), or null. A kind's coefficient is
  // scale_i times the objective's times its tokens (the per-token sums count them).
  const kindArrays = (N) => [0, 1, 2].map(() => new Float64Array(N));
  const clipHigh = (stage) => stage.epsilon_high ?? stage.epsilon; // ClipRange.clip_high

  // Coefficients by kind from a token's weight on its advantage, weight(i, k, positive), positive where
  // A > 0 (toyrl.stages._token_objective); with per-token advantages, each sign's sum takes its own.
  function tokenObjective(advantage, part, counts, kl, tokens, weight) {
    const N = advantage.length, coefficient = kindArrays(N);
    for (let i = 0; i < N; i++) {
      const A = advantage[i], scale = part.scale[i];
      for (let k = 0; k < 3; k++) {
        if (tokens) {
          let value = weight(i, k, true) * tokens.positive[k][i] + weight(i, k, false) * tokens.negative[k][i];
          if (kl) value = value + kl[k][i] * counts[k][i];
          coefficient[k][i] = scale * value;
        } else {
          let value = weight(i, k, A > 0) * A;
          if (kl) value = value + kl[k][i];
          coefficient[k][i] = scale * value * counts[k][i];
        }
      }
    }
    return coefficient;
  }

  port("objective", "PPOClip", { // min(rho A, clip(rho) A): no gradient where the clip is active
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      const N = advantage.length, coefficient = kindArrays(N);
      const high = clipHigh(stage), low = stage.epsilon, dual = stage.dual_clip ?? Infinity;
      let clipped = 0;
      for (let i = 0; i < N; i++) {
        const A = advantage[i], inLoss = part.included[i], scale = part.scale[i];
        for (let k = 0; k < 3; k++) {
          const rho = ratio[k][i];
          if (tokens) { // per-token advantages: each sign's tokens clip at once
            const positiveOn = rho <= 1 + high, negativeOn = rho >= 1 - low && rho <= dual;
            const value = rho * ((positiveOn ? tokens.positive[k][i] : 0) + (negativeOn ? tokens.negative[k][i] : 0));
            coefficient[k][i] = scale * value;
            if (inLoss) clipped += (positiveOn ? 0 : tokens.positiveCount[k][i]) + (negativeOn ? 0 : tokens.negativeCount[k][i]);
          } else {
            const off = rho > (A > 0 ? 1 + high : A < 0 ? dual : Infinity) || rho < (A < 0 ? 1 - low : -Infinity);
            if (off && inLoss) clipped += counts[k][i];
            let value = off ? 0 : A * rho;
            if (kl) value = value + kl[k][i];
            coefficient[k][i] = scale * value * counts[k][i];
          }
        }
      }
      return { coefficient, clipped };
    },
  });

  port("objective", "GSPO", { // one sequence ratio: the geometric mean of the response's token ratios
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      const N = advantage.length, coefficient = kindArrays(N), high = clipHigh(stage), low = stage.epsilon;
      let clipped = 0;
      for (let i = 0; i < N; i++) {
        const A = advantage[i], count = counts[0][i] + counts[1][i] + counts[2][i];
        let logSum = 0;
        for (let k = 0; k < 3; k++) logSum += counts[k][i] > 0 ? counts[k][i] * K.log(ratio[k][i]) : 0;
        const sequence = K.exp(logSum / count);
        const off = (A > 0 && sequence > 1 + high) || (A < 0 && sequence < 1 - low);
        if (off && part.included[i]) clipped += count;
        for (let k = 0; k < 3; k++) {
          let value = (off ? 0 : A * sequence) * counts[k][i];
          if (kl) value = value + kl[k][i] * counts[k][i];
          coefficient[k][i] = part.scale[i] * value;
        }
      }
      return { coefficient, clipped };
    },
  });

  port("objective", "GMPO", { // the geometric mean of the token ratios, each clipped in log space on A's side
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      const N = advantage.length, coefficient = kindArrays(N), high = clipHigh(stage), low = stage.epsilon;
      let clipped = 0;
      for (let i = 0; i < N; i++) {
        const A = advantage[i], count = counts[0][i] + counts[1][i] + counts[2][i];
        const logRatio = [0, 0, 0], off = [false, false, false];
        let logSum = 0;
        for (let k = 0; k < 3; k++) {
          logRatio[k] = counts[k][i] > 0 ? K.log(ratio[k][i]) : 0;
          off[k] = (A > 0 && logRatio[k] > high) || (A < 0 && logRatio[k] < -low);
        }
        for (let k = 0; k < 3; k++) {
          const kept = A > 0 ? Math.min(logRatio[k], high) : A < 0 ? Math.max(logRatio[k], -low) : 0;
          logSum += counts[k][i] * kept;
        }
        const sequence = K.exp(logSum / count);
        for (let k = 0; k < 3; k++) {
          if (off[k] && part.included[i]) clipped += counts[k][i];
          let value = (off[k] ? 0 : A * sequence) * counts[k][i];
          if (kl) value = value + kl[k][i] * counts[k][i];
          coefficient[k][i] = part.scale[i] * value;
        }
      }
      return { coefficient, clipped };
    },
  });

  port("objective", "VESPO", { // phi(w) = exp(lambda + k log w - lambda w), w the sequence ratio (clamped), detached
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      const weight = advantage.map((A, i) => {
        let logSum = 0;
        for (let k = 0; k < 3; k++) logSum += counts[k][i] > 0 ? counts[k][i] * clip(K.log(ratio[k][i]), -20, 20) : 0;
        const logW = clip(logSum, VESPO_LOG_FLOOR, 20);
        const nonnegative = A >= 0;
        const power = nonnegative ? stage.k_pos : stage.k_neg;
        const rate = Math.max(nonnegative ? stage.lambda_pos : stage.lambda_neg, 1e-4);
        return K.exp(rate + power * logW - rate * K.exp(logW));
      });
      return { coefficient: tokenObjective(advantage, part, counts, kl, tokens, (i) => weight[i]), clipped: 0 };
    },
  });

  port("objective", "CISPO", { // sg(clip(rho, 1 - epsilon, 1 + epsilon_high)) A log pi
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      const high = 1 + stage.epsilon_high, low = stage.epsilon == null ? 0 : 1 - stage.epsilon;
      let clipped = 0;
      for (let i = 0; i < advantage.length; i++) {
        for (let k = 0; k < 3; k++) if (part.included[i] && (ratio[k][i] < low || ratio[k][i] > high)) clipped += counts[k][i];
      }
      const weight = (i, k) => Math.min(Math.max(ratio[k][i], low), high);
      return { coefficient: tokenObjective(advantage, part, counts, kl, tokens, weight), clipped };
    },
  });

  port("objective", "SAPO", { // a soft gate: its slope 4 sigma(x) sigma(-x) rho, x = tau (rho - 1)
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      const slope = (i, k, positive) => {
        const rho = ratio[k][i], x = (positive ? stage.tau_pos : stage.tau_neg) * (rho - 1);
        return 4 * expit(x) * expit(-x) * rho;
      };
      return { coefficient: tokenObjective(advantage, part, counts, kl, tokens, slope), clipped: 0 };
    },
  });

  port("objective", "PlainPolicyGradient", { // gpg: A log pi, no ratio
    coefficients(stage, ratio, advantage, part, counts, kl, tokens) {
      return { coefficient: tokenObjective(advantage, part, counts, kl, tokens, () => 1), clipped: 0 };
    },
  });

  /* (sum of the positive values, of the negative ones, their counts) of a(m) = c - d m over
     m = 1..n (toyrl.stages._ramble_sums): a(m) is linear in m, so each sign holds on one run of m. */
  function rambleSums(c, d, n) {
    const x = d !== 0 ? c / d : 0; // a(m) = 0 at m = x
    const below = clip(Math.ceil(x) - 1, 0, n), above = n - clip(Math.floor(x), 0, n);
    const runSum = (first, count) => count * c - d * count * (2 * first + count - 1) / 2;
    const lowSum = runSum(1, below), highSum = runSum(n - above + 1, above);
    if (d === 0) return [c > 0 ? n * c : 0, c < 0 ? n * c : 0, c > 0 ? n : 0, c < 0 ? n : 0];
    return d > 0 ? [lowSum, highSum, below, above] : [highSum, lowSum, above, below];
  }

  /* Per-token advantages under a KL reward (toyrl.stages.K1Reward.token_advantages): each token's
     return A_i - beta sum of the k1 = log pi_old - log pi_ref of the tokens from it on, summed per kind
     and sign. `k1` [3][N] per kind at the sampling policy, `counts` the tokens of each kind. */
  function tokenAdvantages(advantage, beta, k1, counts) {
    const N = advantage.length, make = () => [0, 1, 2].map(() => new Float64Array(N));
    const out = { positive: make(), negative: make(), positiveCount: make(), negativeCount: make() };
    for (let i = 0; i < N; i++) {
      const nonStop = counts[1][i], stopped = counts[2][i];
      const tail = advantage[i] - beta * stopped * k1[2][i]; // c: the m-th non-stop token from the end has c - beta k_ns m
      const approach = tail - beta * (k1[0][i] + nonStop * k1[1][i]);
      const stop = (advantage[i] - beta * k1[2][i]) * stopped;
      const ramble = rambleSums(tail, beta * k1[1][i], nonStop);
      [out.positive[0][i], out.positive[1][i], out.positive[2][i]] = [Math.max(approach, 0), ramble[0], Math.max(stop, 0)];
      [out.negative[0][i], out.negative[1][i], out.negative[2][i]] = [Math.min(approach, 0), ramble[1], Math.min(stop, 0)];
      [out.positiveCount[0][i], out.positiveCount[1][i], out.positiveCount[2][i]] = [approach > 0 ? 1 : 0, ramble[2], (stop > 0 ? 1 : 0) * stopped];
      [out.negativeCount[0][i], out.negativeCount[1][i], out.negativeCount[2][i]] = [approach < 0 ? 1 : 0, ramble[3], (stop < 0 ? 1 : 0) * stopped];
    }
    return out;
  }

  // KL terms (toyrl.stages.kl), taken where beta > 0: loss(stage), the term's coefficient c on a
  // logit's outcome as a function of its (ratio pi / pi_old, log(pi_ref / pi)), the term's gradient
  // on a token being -beta c d log pi, or null (no term in the loss); token_advantages(stage,
  // advantage, old, ref, batch, counts), the per-token advantages of a KL term in the reward (`old`,
  // `ref`: the sampling and reference policies' tables), or null.
  port("kl", "K3", { // pi_ref / pi - 1; ratio-weighted, rho log(pi_ref / pi)
    loss(stage) { return stage.ratio_weighted ? (ratio, logRefRatio) => ratio * logRefRatio : (ratio, logRefRatio) => K.exp(logRefRatio) - 1; },
    token_advantages(stage, advantage, old, ref, batch, counts) { return null; },
  });

  port("kl", "K1Reward", { // beta k1 in each token's return
    loss(stage) { return null; },
    token_advantages(stage, advantage, old, ref, batch, counts) { // k1 = log pi_old - log pi_ref of each token kind
      const k1 = atTokens(batch, old.P, (x, positive) => (positive ? old.positive.get(x) - ref.positive.get(x) : old.negative.get(x) - ref.negative.get(x)));
      return tokenAdvantages(advantage, stage.beta, k1, counts);
    },
  });

  /* A per-logit quantity of each outcome, f(x, positive), at each response's three kinds of token
     [3][N]: the approach token is its prompt's psi_j (positive if right), a non-stop token its
     branch's phi (negative), the stop token that phi (positive). */
  function atTokens(batch, P, f) {
    const B = batch.prompt_index.length, N = batch.length.length, G = N / B;
    const out = [0, 1, 2].map(() => new Float64Array(N));
    const branch = [P, P + 1].map((x) => [f(x, false), f(x, true)]);
    for (let b = 0; b < B; b++) {
      const j = batch.prompt_index[b], approach = [f(j, false), f(j, true)];
      for (let g = 0; g < G; g++) {
        const i = b * G + g, right = batch.right[i];
        out[0][i] = approach[right];
        out[1][i] = branch[right ? 0 : 1][0];
        out[2][i] = branch[right ? 0 : 1][1];
      }
    }
    return out;
  }

  const tokenCounts = (batch) => [new Float64Array(batch.length.length).fill(1), batch.length.map((L, i) => L - batch.stopped[i]), Float64Array.from(batch.stopped)];

  /* An update's loss gradient [P + 2] at theta, in the general form (toyrl.train.Epoch.gradient):
     its ratios against the sampling policy's log-probabilities `old`, the objective's coefficient
     on each token kind, each kind's score; and the fraction of the part's tokens clipped. `kl`:
     {ref (the reference policy's log-probabilities), beta, loss (its KL twin's)} of a term in the
     loss, or null; `tokens`: a KL reward's per-token advantages, or null. */
  function laterGradient(objective, theta, old, batch, advantage, part, kl, tokens) {
    const P = theta.length - 2, B = batch.prompt_index.length, N = advantage.length, G = N / B;
    const now = logTables(theta, batch.prompt_index);
    const logOf = (table, x, positive) => (positive ? table.positive : table.negative).get(x);
    const ratio = atTokens(batch, P, (x, positive) => K.exp(logOf(now, x, positive) - logOf(old, x, positive)));
    let klTerm = null;
    if (kl) { // beta c(rho, log(pi_ref / pi))
      klTerm = atTokens(batch, P, (x, positive) => {
        const rho = K.exp(logOf(now, x, positive) - logOf(old, x, positive));
        return kl.beta * kl.loss(rho, logOf(kl.ref, x, positive) - logOf(now, x, positive));
      });
    }
    const counts = tokenCounts(batch);
    const { coefficient, clipped } = twin("objective", objective).coefficients(objective, ratio, advantage, part, counts, klTerm, tokens);
    const stopRight = expit(theta[P]), stopWrong = expit(theta[P + 1]);
    const stopScore = [positiveScore(theta[P]), positiveScore(theta[P + 1])];
    const approach = new Float64Array(N), ramble = new Float64Array(N);
    for (let b = 0; b < B; b++) {
      const j = batch.prompt_index[b], positive = positiveScore(theta[j]), negative = -expit(theta[j]);
      for (let g = 0; g < G; g++) {
        const i = b * G + g, onRight = batch.right[i] === 1;
        approach[i] = coefficient[0][i] * (onRight ? positive : negative);
        ramble[i] = coefficient[1][i] * -(onRight ? stopRight : stopWrong) + coefficient[2][i] * stopScore[onRight ? 0 : 1];
      }
    }
    const grad = scatterGradient(theta, batch, approach, ramble, 1); // the scale already holds 1/(D n)
    return { grad, fraction: part.tokens > 0 ? clipped / part.tokens : 0 };
  }

  function clippedGradient(grad, limit) { // torch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1
    if (!limit) return grad;
    const factor = Math.min(1, limit / (norm(grad) + 1e-6));
    return grad.map((g) => g * factor);
  }

  /* One run's step, top to bottom (toyrl.train.train_step): sample, reward, select, advantage (once
     a batch); then each update of the schedule: its part's normaliser, the objective, the gradient,
     Adam. Returns the first update's loss gradient [P + 2] and what the recorder keeps; `apply`
     false (the last row) evaluates the batch and the first gradient without a step. */
  function trainStep(run, c, step, apply) {
    const { stages } = run.variant, schedule = stages.schedule, theta = run.theta;
    const G = c.group_size, N = c.batch_prompts * G;
    const noise = run.noise(step);
    const drawn = sampleBatch(theta, noise.prompt_index, noise.approach, noise.exponential, c.cap, G, run.batch);
    const [batch, tokensSampled] = twin("sampler", stages.sampler).batch(stages.sampler, drawn, theta, c, run.refill);
    const correct = correctness(batch, c);
    const rewards = twin("reward", stages.reward).rewards(stages.reward, batch, c, correct);
    const selected = twin("selector", stages.selector).included(stages.selector, batch, rewards, G);
    const tokens = tokenCount(batch, c.approach_tokens);
    const advantage = twin("advantage", stages.advantage).advantages(stages.advantage, rewards, c, G, tokens);
    // a token budget lays micro-batches out only for a normaliser taken on each (Plan.laid_out)
    const budgeted = Boolean(schedule.token_budget ?? 0) && Boolean(stages.normaliser.per_micro_batch);
    const whole = (schedule.mini_batches ?? 1) === 1 && (schedule.micro_batches ?? 1) === 1 && (schedule.ranks ?? 1) === 1 && !budgeted;
    const positions = run.orders(step);
    const part = (update) => {
      const parts = whole ? null : partsOf(update, positions, schedule, N, tokens, budgeted);
      const [D, n] = partDenominators(stages.normaliser, tokens, selected, c, parts, schedule);
      return partOf(batch, parts ? both(selected, parts.members) : selected, D, n);
    };
    const first = part(0);
    const updates = twin("schedule", schedule).updates(schedule);
    const klStage = stages.kl, klTwin = (klStage.beta ?? 0) > 0 ? twin("kl", klStage) : null; // beta 0: no KL term
    // the sampling policy's log-probabilities (the ratios' reference) and the KL's reference policy's
    const old = updates > 1 || klTwin ? logTables(theta, batch.prompt_index) : null;
    const ref = klTwin ? logTables(run.thetaRef, batch.prompt_index) : null; // the initial policy
    const loss = klTwin ? klTwin.loss(klStage) : null;
    const kl = loss ? { ref, beta: klStage.beta, loss } : null;
    // a KL reward's per-token advantages
    const perToken = klTwin ? klTwin.token_advantages(klStage, advantage, old, ref, batch, tokenCounts(batch)) : null;
    // The first update is on-policy: ratio 1, so every token of a response has weight A / D and its
    // ramble's scores sum in closed form; with a KL term, the general form at ratio 1.
    let grad;
    if (kl || perToken) {
      grad = laterGradient(stages.objective, theta, old, batch, advantage, first, kl, perToken).grad;
    } else {
      const weight = advantage.map((a, i) => (first.included[i] && first.D[i] > 0 ? a / first.D[i] : 0));
      grad = onPolicyGradient(theta, batch, weight, first.n);
    }
    const result = { grad, batch, correct, tokensSampled, clipFraction: 0 };
    if (!apply) return result;
    run.adam.step(theta, clippedGradient(grad, schedule.max_grad_norm));
    let clipSum = 0;
    for (let update = 1; update < updates; update++) { // later updates: the ratios move from 1
      const later = laterGradient(stages.objective, theta, old, batch, advantage, whole ? first : part(update), kl, perToken);
      clipSum += later.fraction;
      run.adam.step(theta, clippedGradient(later.grad, schedule.max_grad_norm));
    }
    result.clipFraction = clipSum / updates;
    return result;
  }

  function batchStatistics(batch, correct, G) {
    const N = correct.length;
    let nCorrect = 0, lengthSum = 0, correctLength = 0, uniform = 0;
    for (let start = 0; start < N; start += G) {
      let group = 0;
      for (let i = start; i < start + G; i++) {
        group += correct[i]; lengthSum += batch.length[i]; correctLength += batch.length[i] * correct[i];
      }
      nCorrect += group;
      if (group === 0 || group === G) uniform += 1;
    }
    const nIncorrect = N - nCorrect;
    return {
      batch_accuracy: nCorrect / N,
      batch_length_mean: lengthSum / N,
      batch_length_correct: nCorrect > 0 ? correctLength / nCorrect : NaN,
      batch_length_incorrect: nIncorrect > 0 ? (lengthSum - correctLength) / nIncorrect : NaN,
      zero_variance_fraction: uniform / (N / G),
    };
  }

  // --- the exact expected update (toyrl.expected) -------------------------------------------------
  const LOG_FACTORIAL = [0];
  function logFactorial(m) { // log m! = log 1 + ... + log m, summed in that order (toyrl.expected.log_factorials)
    while (LOG_FACTORIAL.length <= m) {
      const k = LOG_FACTORIAL.length;
      LOG_FACTORIAL.push(LOG_FACTORIAL[k - 1] + K.log(k));
    }
    return LOG_FACTORIAL[m];
  }

  function binomialPmf(n, p, out) { // P(Binomial(n, p) = k) for k = 0..n, in log space, into out
    const logP = K.log(p), logQ = K.log1p(-p);
    for (let k = 0; k <= n; k++) {
      const successes = k === 0 ? 0 : k * logP, failures = n - k === 0 ? 0 : (n - k) * logQ;
      out[k] = K.exp(logFactorial(n) - logFactorial(k) - logFactorial(n - k) + successes + failures);
    }
    return out;
  }

  const SCRATCH = [];
  function scratch(cap) { // four arrays [cap], kept for the next call
    if (SCRATCH.length === 0 || SCRATCH[0].length !== cap) SCRATCH.splice(0, 4, ...[0, 1, 2, 3].map(() => new Float64Array(cap)));
    return SCRATCH;
  }

  const PMF_BLOCK = 64; // lengths per block of geometricPmf (toyrl.expected.PMF_BLOCK)
  const WITHIN = new Float64Array(PMF_BLOCK);

  /* P(K = k) = s q^(k - 1) for k = 1..cap into out [cap], by blocks as toyrl.expected.geometric_pmf:
     with k - 1 = 64 j + i, exp(log s + 64 j log q) exp(i log q). */
  function geometricPmf(phi, cap, out) {
    const logS = logExpit(phi), logQ = logExpit(-phi);
    for (let i = 0; i < PMF_BLOCK; i++) WITHIN[i] = K.exp(i * logQ);
    for (let start = 0; start < cap; start += PMF_BLOCK) {
      const first = K.exp(logS + start * logQ), end = Math.min(start + PMF_BLOCK, cap);
      for (let k = start; k < end; k++) out[k] = first * WITHIN[k - start];
    }
    return out;
  }

  /* Sums over one branch's outcomes of P(o)/D(o) and P(o) score(o)/D(o), split at the reward's window
     [low, high] of K when given (toyrl.expected._branch_sums). */
  function branchSums(phi, c, variant, window) {
    const cap = c.cap, stages = variant.stages, approachTokens = c.approach_tokens, lengthNorm = c.length_norm_value;
    const s = expit(phi);
    const scale = (stages.normaliser.averaged ?? true) ? 1 : c.batch_prompts * c.group_size;
    const keepTail = twin("selector", stages.selector).keeps_truncated(stages.selector);
    const normaliser = twin("normaliser", stages.normaliser);
    const [weight, scored, masked, pmfs] = scratch(cap);
    geometricPmf(phi, cap, pmfs);
    let dTail = 1;
    for (let k = 1; k <= cap; k++) {
      let pmf = pmfs[k - 1];
      const d = normaliser.response_denominator(stages.normaliser, k + approachTokens, lengthNorm);
      let score = 1 - k * s;
      if (k === 1 && phi > SCORE_EXACT_ABOVE) score = expit(-phi);
      if (scale !== 1) pmf = scale * pmf;
      scored[k - 1] = pmf * score / d;
      weight[k - 1] = pmf / d;
      if (k === cap) dTail = d;
    }
    const tail = survival(cap, phi);
    const tailWeight = keepTail ? scale * tail / dTail : 0;
    const tailScored = keepTail ? scale * tail * (-cap * s) / dTail : 0;
    if (!window) return { weightOut: sum(weight) + tailWeight, scoredOut: sum(scored) + tailScored };
    const maskedSum = (values, inside) => { // numpy's: the values times the mask, summed over every k
      for (let k = 1; k <= cap; k++) masked[k - 1] = values[k - 1] * ((k >= window[0] && k <= window[1]) === inside ? 1 : 0);
      return sum(masked);
    };
    return {
      weightIn: maskedSum(weight, true),
      scoredIn: maskedSum(scored, true),
      weightOut: maskedSum(weight, false) + tailWeight,
      scoredOut: maskedSum(scored, false) + tailScored,
    };
  }

  /* E[g] [P + 2], the ascent direction of the variant's update at theta. */
  function expectedUpdate(theta, c, variant) {
    const P = theta.length - 2, G = c.group_size, stages = variant.stages;
    const phiRight = theta[P], phiWrong = theta[P + 1];
    const [low, high] = twin("reward", stages.reward).window(stages.reward, c);
    const right = branchSums(phiRight, c, variant, [low, high]);
    const wrong = branchSums(phiWrong, c, variant, null);
    const window = survival(low - 1, phiRight) * stopWithin(high - low + 1, phiRight);
    const eps = stdEps(stages.advantage, c), advantage = twin("advantage", stages.advantage), selector = twin("selector", stages.selector);
    // a group out of the loss by its rewards has weight 0 (toyrl.expected._mean_advantage)
    const kept = (successes) => !selector.keeps_group || selector.keeps_group(stages.selector, successes, G);
    const correctTable = new Float64Array(G), incorrectTable = new Float64Array(G);
    for (let k = 0; k < G; k++) {
      correctTable[k] = kept(1 + k) ? advantage.conditional(stages.advantage, 1, k, G, eps) : 0;
      incorrectTable[k] = kept(k) ? advantage.conditional(stages.advantage, 0, k, G, eps) : 0;
    }
    const grad = new Float64Array(P + 2);
    const phiRightTerms = new Float64Array(P), phiWrongTerms = new Float64Array(P);
    const pmf = new Float64Array(G), terms = new Float64Array(G);
    const mean = (table) => { // E[A_1 | r_1] = sum over k' of P(k') A(r_1, k')
      for (let k = 0; k < G; k++) terms[k] = pmf[k] * table[k];
      return sum(terms);
    };
    for (let j = 0; j < P; j++) {
      const pRight = expit(theta[j]), pWrong = expit(-theta[j]);
      binomialPmf(G - 1, pRight * window, pmf);
      const abarCorrect = mean(correctTable), abarIncorrect = mean(incorrectTable);
      const onRight = abarCorrect * right.weightIn + abarIncorrect * right.weightOut;
      const onWrong = abarIncorrect * wrong.weightOut;
      grad[j] = pRight * pWrong * (onRight - onWrong) / P;
      phiRightTerms[j] = pRight * (abarCorrect * right.scoredIn + abarIncorrect * right.scoredOut);
      phiWrongTerms[j] = pWrong * abarIncorrect * wrong.scoredOut;
    }
    grad[P] = sum(phiRightTerms) / P;
    grad[P + 1] = sum(phiWrongTerms) / P;
    return grad;
  }

  // --- Adam and the run ----------------------------------------------------------------------------
  class Adam { // toyrl.train.Adam: its bias corrections 1 - beta^t by toyrl.kernels.power
    constructor(size, c) { this.c = c; this.m = new Float64Array(size); this.v = new Float64Array(size); this.t = 0; }
    step(theta, grad) {
      const { adam_beta1: b1, adam_beta2: b2, adam_eps: eps, lr } = this.c, m = this.m, v = this.v;
      this.t += 1;
      const correction1 = 1 - K.power(b1, this.t), correction2 = 1 - K.power(b2, this.t);
      for (let i = 0; i < theta.length; i++) {
        m[i] = m[i] * b1 + (1 - b1) * grad[i];
        v[i] = v[i] * b2 + (1 - b2) * (grad[i] * grad[i]);
        theta[i] -= lr * (m[i] / correction1) / (Math.sqrt(v[i] / correction2) + eps);
      }
    }
  }

  const norm = (v) => Math.sqrt(sum(v.map((x) => x * x)));

  /* theta_0 [P + 2] (toyrl.train.initial_theta): psi_j = mean + std z_j, z_j = Phi^-1(U_j) from the
     seed's init stream (toyrl.noise.standard_normal), phi = logit of the set stop probabilities; or
     the spec's theta0 for the seed. */
  function initialTheta(c, init, given) {
    const P = c.prompts;
    if (given !== undefined) {
      if (!Array.isArray(given) || given.length !== P + 2 || !given.every(Number.isFinite)) fail(`theta0 must hold prompts + 2 = ${P + 2} finite logits per seed`);
      return Float64Array.from(given);
    }
    const theta = init.fill(P, "open", new Float64Array(P + 2));
    for (let j = 0; j < P; j++) theta[j] = c.prompt_logit_mean + c.prompt_logit_std * K.normalQuantile(theta[j]);
    theta[P] = K.log(c.stop_prob_right / (1 - c.stop_prob_right));
    theta[P + 1] = K.log(c.stop_prob_wrong / (1 - c.stop_prob_wrong));
    return theta;
  }

  /* A seed's step noise (toyrl.train.step_noise), drawn once a step for all its variants (common
     random numbers): B distinct prompts, the first B of the order of P uniforms (toyrl.noise.
     permutation_prefix), and the approach uniforms and length exponentials [B G]. */
  function noiseSource(streams, c) {
    const B = c.batch_prompts, P = c.prompts, N = B * c.group_size, uniforms = new Float64Array(P);
    const drawn = { step: -1, prompt_index: new Int32Array(B), approach: new Float64Array(N), exponential: new Float64Array(N) };
    return (step) => {
      if (step === drawn.step + 1) {
        streams[STREAM.prompts].fill(P, "random", uniforms);
        toyrlRandom.permutationPrefix(uniforms, P, B, 0, drawn.prompt_index);
        streams[STREAM.approach].fill(N, "random", drawn.approach);
        exponentials(streams[STREAM.length], N, drawn.exponential);
        drawn.step = step;
      } else if (step !== drawn.step) {
        throw new Error(`step ${step}'s noise asked after step ${drawn.step}'s`);
      }
      return drawn;
    };
  }

  // Schedules (toyrl.stages.schedule): updates(stage), the optimiser's updates on each sampled batch;
  // orders(stage), the random orders of its responses drawn a batch. Their other settings (mini- and
  // micro-batches, ranks, token budget) are the Schedule protocol's fields, read as they are.
  port("schedule", "Epochs", {
    updates(stage) { return (stage.num_iterations ?? 1) * (stage.mini_batches ?? 1); },
    orders(stage) { return { none: 0, once: 1, epoch: stage.num_iterations ?? 1 }[stage.shuffle ?? "none"]; },
  });

  /* Each step's orders of the responses for a schedule that shuffles (toyrl.train.step_orders: the
     ranks of a uniformly random permutation, one order a batch ('once') or an epoch ('epoch')), from
     the run's shuffle stream; null when it does not shuffle. */
  function orderSource(rng, c, schedule) {
    const draws = twin("schedule", schedule).orders(schedule);
    if (!draws) return () => null;
    const N = c.batch_prompts * c.group_size;
    return () => {
      const uniforms = rng.fill(draws * N, "random");
      return Array.from({ length: draws }, (_, e) => {
        const order = toyrlRandom.permutationPrefix(uniforms, N, N, e * N), ranks = new Int32Array(N);
        order.forEach((response, rank) => { ranks[response] = rank; });
        return ranks;
      });
    };
  }

  // What the page's runs hold and how long a step of all of them takes, measured under node on a
  // 2-core x86-64 machine: the simulator's own about 1 MB; a run about 8 KB (its streams, Adam,
  // 17 columns' arrays) besides its rows, its P + 2 logits four times and 40 bytes a response (its
  // batch, its step's scratch); a seed's shared streams and noise about 6 KB, its P + 2 initial
  // logits, P uniforms and 2 x 8 bytes a response; the mean field's scratch 4 x 8 bytes a cap
  // token, once. A run's step about 40 us plus 0.5 us
  // a prompt; a sampled one 0.6 us a response an update, and 20 us a response its layout deals or
  // cuts, for each count the token budget tries (one at best, `worst` every count it may:
  // toyrl.layout.worst_tries); a mean-field one 150 us plus 0.15 us a cap token.
  const RUN_BYTES = 8000, SEED_BYTES = 6000, RESPONSE_BYTES = 40;

  function footprint(c, variants, seedCount, meanField) {
    const runs = variants.length * seedCount, N = c.batch_prompts * c.group_size, P = c.prompts;
    let bytes = 1e6 + runs * (RUN_BYTES + 8 * COLUMNS.length * (c.steps + 1) + 32 * (P + 2)) + seedCount * (SEED_BYTES + 16 * (P + 1));
    bytes += meanField ? 32 * (c.cap + 1) : runs * RESPONSE_BYTES * N + seedCount * 16 * N;
    let seconds = 0, worst = 0;
    for (const v of variants) {
      const schedule = v.stages.schedule, updates = (schedule.num_iterations ?? 1) * (schedule.mini_batches ?? 1);
      const dealt = (schedule.ranks ?? 1) > 1 ? N : 0, tries = meanField ? 0 : layoutTries(v, c);
      const own = meanField ? 150e-6 + 0.15e-6 * c.cap : 0.6e-6 * N * updates + 20e-6 * (dealt + Math.min(tries, 1) * N * updates);
      seconds += seedCount * (40e-6 + 0.5e-6 * P + own);
      worst += seedCount * 20e-6 * Math.max(0, tries - 1) * N * updates;
    }
    return { bytes, seconds, worst: seconds + worst };
  }

  /* The most counts a variant's token budget tries an update (toyrl.train.layout_work): 0 if its
     micro-batches are not cut by tokens. */
  function layoutTries(v, c) {
    const schedule = v.stages.schedule, budget = schedule.token_budget ?? 0;
    if (!budget || !v.stages.normaliser.per_micro_batch) return 0;
    const share = (c.batch_prompts * c.group_size) / (schedule.ranks ?? 1) / (schedule.mini_batches ?? 1);
    const shortest = (schedule.prompt_tokens ?? 0) + 1 + c.approach_tokens;
    return share - Math.min(share, Math.max(1, Math.ceil((share * shortest) / budget))) + 1;
  }

  const megabytes = (bytes) => `${Math.ceil(bytes / 1e6).toLocaleString("en")} MB`;

  const RUN_KEYS = new Set(["variants", "variant", "seeds", "mean_field", "theta0", "gradients"]);

  class Run {
    constructor(spec) {
      if (spec === null || typeof spec !== "object") fail("spec must be an object {variants, seeds, steps, mean_field, ...config fields}");
      for (const key of Object.keys(spec)) {
        if (!RUN_KEYS.has(key) && !CONFIG_FIELDS.includes(key)) fail(`unknown spec key ${JSON.stringify(key)}; valid: ${[...RUN_KEYS, ...CONFIG_FIELDS].join(", ")}`);
      }
      const fields = {};
      for (const name of CONFIG_FIELDS) if (name in spec) fields[name] = spec[name];
      const c = makeConfig(fields);
      const chosen = spec.variants ?? (spec.variant !== undefined ? [spec.variant] : null);
      if (!Array.isArray(chosen) || chosen.length === 0) fail("variants must be a non-empty list of names or specs");
      let seeds = Number.isInteger(spec.seeds) ? null : spec.seeds ?? [0];
      if (seeds === null ? !(spec.seeds >= 1 && spec.seeds <= LIMITS.max_seeds)
        : !Array.isArray(seeds) || seeds.length === 0 || seeds.length > LIMITS.max_seeds || !seeds.every((s) => Number.isSafeInteger(s) && s >= 0)) {
        const most = LIMITS.max_seeds.toLocaleString("en");
        fail(`seeds must be a count in 1..${most} or a list of 1..${most} integers in 0..2^53 - 1 (got ${JSON.stringify(spec.seeds)})`);
      }
      const seedCount = seeds === null ? spec.seeds : seeds.length, runs = chosen.length * seedCount;
      // checked before anything is allocated: the page holds every row, and every run's batch, at once
      const rows = runs * (c.steps + 1), limit = Math.min(LIMITS.max_rows, LIMITS.page_rows);
      if (rows > limit) fail(`${chosen.length} variant${chosen.length > 1 ? "s" : ""} x ${seedCount} seed${seedCount > 1 ? "s" : ""} x ${(c.steps + 1).toLocaleString("en")} steps would be ${rows.toLocaleString("en")} rows; the page holds at most ${limit.toLocaleString("en")}: use fewer variants, seeds or steps (toyrl run holds ${LIMITS.max_rows.toLocaleString("en")})`);
      const responses = runs * c.batch_prompts * c.group_size;
      if (!spec.mean_field && responses > LIMITS.max_responses) fail(`${runs.toLocaleString("en")} runs x batch_prompts x group_size would be ${responses.toLocaleString("en")} responses a step; the page holds at most ${LIMITS.max_responses.toLocaleString("en")}: use fewer variants, seeds, prompts or a smaller group`);
      const chosenVariants = distinct(chosen.map(resolve));
      const { bytes, seconds } = footprint(c, chosenVariants, seedCount, spec.mean_field);
      const what = `${runs.toLocaleString("en")} run${runs > 1 ? "s" : ""}`;
      if (bytes > LIMITS.page_bytes) fail(`${what} x ${(c.steps + 1).toLocaleString("en")} steps would hold about ${megabytes(bytes)}; the page holds at most ${megabytes(LIMITS.page_bytes)}: use fewer variants, seeds, steps, prompts or a smaller batch (or toyrl run)`);
      if (seconds > LIMITS.page_step_seconds) fail(`a step of ${what} would take about ${Math.ceil(seconds).toLocaleString("en")} s, the page answering nothing meanwhile; it takes at most ${LIMITS.page_step_seconds} s a step: use fewer variants, seeds, prompts, a smaller batch or cap (or toyrl run)`);
      if (seeds === null) seeds = Array.from({ length: spec.seeds }, (_, i) => i);
      if (spec.theta0 !== undefined && !(Array.isArray(spec.theta0) && spec.theta0.length === seeds.length)) fail(`theta0 must hold one policy per seed (${seeds.length})`);
      this.meanField = Boolean(spec.mean_field);
      this.variants = chosenVariants;
      for (const v of this.variants) {
        const reason = support(v, this.meanField);
        if (reason) fail(`variant ${v.name}: ${reason}`);
        const refused = variantRefused(v, c);
        if (refused) fail(refused);
      }
      // then a run's updates, as toyrl.experiment.check_runs: of the variant that takes the most
      const updates = c.steps * Math.max(...this.variants.map((v) => (v.stages.schedule.num_iterations ?? 1) * (v.stages.schedule.mini_batches ?? 1)));
      const refused = refusedBy(DATA.refusals.runs, valueOf(c, {}, { updates }));
      if (refused) fail(refused);
      this.config = c;
      this.steps = c.steps;
      this.runs = this.variants.flatMap((v) => seeds.map((seed) => ({ variant: v.name, seed })));
      // Each seed's streams (SeedSequence(seed).spawn(6)): its initial logits and step noise, shared
      // by its variants; each run has the shuffle and refill streams of its own copy.
      const shared = seeds.map((seed, i) => {
        const streams = toyrlRandom.runStreams(seed);
        const theta0 = initialTheta(c, streams[STREAM.init], spec.theta0?.[i]);
        return { theta0, noise: this.meanField ? null : noiseSource(streams, c) };
      });
      const N = c.batch_prompts * c.group_size;
      this.state = this.variants.flatMap((variant) => seeds.map((seed, i) => {
        const theta = Float64Array.from(shared[i].theta0);
        const run = { variant, seed, theta, thetaRef: Float64Array.from(theta), adam: new Adam(theta.length, c) };
        if (!this.meanField) {
          const own = toyrlRandom.runStreams(seed);
          run.noise = shared[i].noise;
          run.refill = refillSource(own[STREAM.refill]);
          run.orders = orderSource(own[STREAM.shuffle], c, variant.stages.schedule);
          run.batch = { right: new Uint8Array(N), length: new Float64Array(N), stopped: new Uint8Array(N) };
        }
        return run;
      }));
      this.columns = Object.fromEntries(COLUMNS.map((name) => [name, this.runs.map(() => new Float64Array(c.steps + 1).fill(NaN))]));
      this.gradients = spec.gradients ? this.runs.map(() => []) : null;
      this.t = -1;
      this.advance(1); // row 0: the initial policy, its batch and gradient
    }

    get done() { return this.t >= this.steps; }

    /* Record up to n more steps (row t: the policy theta_t, its batch and gradient; theta_{t+1}
       follows by Adam for t < steps); returns the last recorded step. */
    advance(n) {
      const c = this.config;
      for (let k = 0; k < n && !this.done; k++) {
        const step = this.t + 1;
        this.state.forEach((run, r) => {
          const metrics = exactMetrics(run.theta, c.cap, c.min_length);
          let grad;
          if (this.meanField) {
            grad = expectedUpdate(run.theta, c, run.variant).map((g) => -g);
            metrics.clip_fraction = 0;
            metrics.grad_norm = norm(grad);
            if (step < this.steps) run.adam.step(run.theta, grad);
          } else {
            const sampled = trainStep(run, c, step, step < this.steps); // theta moves on in place
            grad = sampled.grad;
            Object.assign(metrics, batchStatistics(sampled.batch, sampled.correct, c.group_size));
            metrics.tokens_sampled = sampled.tokensSampled;
            metrics.clip_fraction = sampled.clipFraction;
            metrics.grad_norm = norm(grad);
          }
          for (const name of COLUMNS) if (name in metrics) this.columns[name][r][step] = metrics[name];
          if (this.gradients) this.gradients[r].push(Array.from(grad));
        });
        this.t = step;
      }
      return this.t;
    }

    column(name) {
      if (!(name in this.columns)) fail(`unknown column ${JSON.stringify(name)}; valid: ${COLUMNS.join(", ")}`);
      return this.columns[name];
    }

    /* The flat columns of `toyrl run`: a row per run and step, runs in order. */
    table() {
      const rows = this.steps + 1;
      const out = { variant: [], seed: [], step: [] };
      for (const run of this.runs) {
        for (let t = 0; t < rows; t++) { out.variant.push(run.variant); out.seed.push(run.seed); out.step.push(t); }
      }
      for (const name of COLUMNS) out[name] = this.columns[name].flatMap((values) => Array.from(values));
      return out;
    }
  }

  function simulate(spec) {
    const started = performance.now();
    const run = new Run(spec);
    run.advance(run.steps);
    const result = { columns: run.table(), seconds: (performance.now() - started) / 1000 };
    if (run.gradients) result.gradients = run.gradients;
    return result;
  }

  // A group's advantages under a registered advantage stage at its defaults and std_eps `stdEps`:
  // the function the simulator trains with, for the page's worked examples.
  function groupAdvantages(name, rewards, stdEps = 0) {
    const entry = REGISTRY.advantage[name];
    const stage = { name, class: entry.class, ...entry.fixed, ...entry.parameters, std_eps: stdEps };
    return twin("advantage", stage).advantages(stage, Float64Array.from(rewards), { std_eps: stdEps }, rewards.length);
  }

  const presets = [...PRESETS.values()].map((v) => ({ ...v, page: support(v.name, false), page_mean_field: support(v.name, true) }));

  window.toyrl = {
    data: DATA,
    presets,
    columns: COLUMNS,
    resolve,
    support,
    checkSetting: (name, value, written) => checkField({ [name]: value }, name, written),
    start: (spec) => new Run(spec),
    footprint: (spec) => footprint(makeConfig(Object.fromEntries(CONFIG_FIELDS.filter((name) => name in spec).map((name) => [name, spec[name]]))), (spec.variants ?? []).map(resolve), spec.seeds ?? 1, Boolean(spec.mean_field)),
    simulate,
    groupAdvantages,
    InputError,
    layout: { balancedPartitions, tokenBudgetParts, fewestParts }, // verl's V1 layout, for the agreement tests
    ports: PORTS, // each stage class's twin, by kind and class (tests/test_ported.py)
  };
})();
