/* toyrl explorer's interface: everything the page shows and every control, on top of sim.js
   (window.toyrl). The run comes first: it trains the toy with toyrl.start, draws its curves as
   SVG at the container's width in the figures' looks, and says its lesson in one sentence under
   the length chart. Below, the token weights and the update mass are computed by hand, as
   toyrl.objective.advantages does at std_eps = 0. The whole view (variants, settings, mode,
   trained step, cursor) lives in the URL's hash, so a link reproduces it.
   Adds to window.toyrl: exportChart(id, 'svg' | 'png'), ui (the live state, for tests). */
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const toyrl = window.toyrl;
  if (!toyrl || !toyrl.data) {
    document.querySelector("main").insertAdjacentHTML("afterbegin",
      '<p class="error">The simulator (sim.js) is missing from this page: rebuild it with <code>toyrl explore</code>.</p>');
    return;
  }
  const DATA = toyrl.data;
  const ARTICLE = DATA.article; // ["grpo", "std_only", "length_only", "dr_grpo"]
  const ARTICLE_SCALE_LR = DATA.config.lr.default;
  const SVG_FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  const INK = "#1b1b1b", MUTED = "#4d4d4d", GRID = "#e4e6ea", AXIS = "#4d4d4d", STYLE_GREY = "#8a8f98";

  // --- numbers as text -----------------------------------------------------------------------------
  const sig4 = (value) => (Number.isFinite(value) ? Number(value.toPrecision(4)).toString() : "n/a");
  // Intl formatters are made once: making one per number is what a redraw spent most on.
  const FORMATS = new Map();
  function fixed(value, decimals) {
    if (!FORMATS.has(decimals)) FORMATS.set(decimals, new Intl.NumberFormat("en", { minimumFractionDigits: decimals, maximumFractionDigits: decimals }));
    return FORMATS.get(decimals).format(value + 0); // + 0: no "-0"
  }
  const tokens = (value) => (Number.isFinite(value) ? fixed(Math.round(value), 0) : "n/a");
  const percent = (value) => (Number.isFinite(value) ? `${(100 * value).toFixed(1)}%` : "n/a");
  const escapeXml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

  // An output shows 4 significant digits; the full double is kept in data-value for the tests.
  function show(id, value) {
    const element = $(id);
    element.dataset.value = String(value);
    element.textContent = sig4(value);
  }

  // A spec value as Python's repr writes it (toyrl variants' text): True, 1e-06.
  function pythonText(value) {
    if (typeof value === "boolean") return value ? "True" : "False";
    if (typeof value === "number" && value !== 0 && (Math.abs(value) < 1e-4 || Math.abs(value) >= 1e16)) {
      return value.toExponential().replace(/e([+-])(\d)$/, "e$10$2");
    }
    return String(value);
  }
  const specText = (spec) => Object.entries(spec).map(([key, value]) => `${key}=${pythonText(value)}`).join(",");

  // --- ticks: multiples of 1, 2 or 5 x 10^k --------------------------------------------------------
  function tickStep(span, count) {
    const raw = span / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const unit = [1, 2, 5, 10].find((m) => m * power >= raw * (1 - 1e-9));
    return unit * power;
  }
  function ticksOf(low, high, step) {
    const out = [];
    for (let i = Math.ceil(low / step - 1e-9); i * step <= high + step * 1e-9; i++) out.push(i * step + 0);
    return out;
  }
  function tickLabel(value, step) {
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return fixed(value, decimals);
  }
  const linearTicks = (low, high, step) => ticksOf(low, high, step).map((value) => ({ value, text: tickLabel(value, step) }));

  // --- a log axis of probabilities, labelled as the figures label them (toyrl.plots' "1/N") ---------
  const oneInText = (n) => `1/${n < 1e7 ? fixed(Math.round(n), 0) : n.toExponential(0).replace("+", "")}`;
  const oneIn = (p) => (p > 0 && Number.isFinite(p) ? oneInText(1 / p) : "n/a");
  /* Ticks at p = 1/N for N = 1, 3, 10, 30, ... (only powers of ten, and fewer of them, over many
     decades), from the tick at or below `low` to the one at or above `high`, at least three. */
  function logTicks(low, high) {
    const decades = Math.max(1, Math.ceil(Math.log10(high / low)) + 1);
    const stride = Math.ceil(decades / 8), multiples = decades > 4 ? [1] : [1, 3];
    const candidates = []; // N, rising: p falling
    for (let k = 0; k <= 320; k += stride) for (const m of multiples) if (m * 10 ** k < Infinity) candidates.push(m * 10 ** k);
    let first = candidates.findLastIndex((n) => 1 / n >= high * (1 - 1e-12)); // the largest p at or above high
    let last = candidates.findIndex((n) => 1 / n <= low * (1 + 1e-12)); // the largest p at or below low
    if (first < 0) first = 0;
    if (last < 0) last = candidates.length - 1;
    while (last - first < 2) { if (first > 0) first--; else last++; }
    return candidates.slice(first, last + 1).map((n) => ({ value: 1 / n, text: oneInText(n) }));
  }

  // --- looks: the figures' (toyrl.plots, in the page's data); every variant also numbered ----------
  const LOOKS = DATA.looks, OUTCOMES = LOOKS.outcomes;
  const variantLabel = (name) => LOOKS.labels[name] ?? name;
  const lookKey = (look) => `${look.colour} ${look.dashes.join(",")} ${look.marker}`;
  /* A look {colour, dashes (in line widths), marker} per variant, as toyrl.plots.variant_looks deals
     them: the article's four fixed, each other variant the next look of the pool (markers slowest,
     then line styles, then colours) that none of the article's chosen ones has. */
  function variantLooks(names) {
    const fixedLooks = names.map((name) => LOOKS.article[name] ?? null);
    const taken = new Set(fixedLooks.filter(Boolean).map(lookKey));
    const pool = [];
    for (const marker of LOOKS.extra.markers) {
      for (const dashes of LOOKS.extra.dashes) {
        for (const colour of LOOKS.extra.colours) if (!taken.has(lookKey({ colour, dashes, marker }))) pool.push({ colour, dashes, marker });
      }
    }
    let next = 0;
    return fixedLooks.map((look) => look ?? pool[next++ % pool.length]);
  }

  // A marker of the figures (matplotlib's codes: o s ^ v D P X) centred at (x, y), radius r.
  const PLUS = [[-0.35, -1], [0.35, -1], [0.35, -0.35], [1, -0.35], [1, 0.35], [0.35, 0.35], [0.35, 1], [-0.35, 1], [-0.35, 0.35], [-1, 0.35], [-1, -0.35], [-0.35, -0.35]];
  const SHAPES = {
    s: [[-0.85, -0.85], [0.85, -0.85], [0.85, 0.85], [-0.85, 0.85]],
    "^": [[0, -1.15], [1, 0.75], [-1, 0.75]],
    v: [[0, 1.15], [1, -0.75], [-1, -0.75]],
    D: [[0, -1.2], [0.8, 0], [0, 1.2], [-0.8, 0]],
    P: PLUS,
    X: PLUS.map(([a, b]) => [0.75 * (a - b), 0.75 * (a + b)]),
  };
  function markerSvg(code, x, y, r, fill, stroke = fill, width = 1) {
    const paint = `fill="${fill}" stroke="${stroke}" stroke-width="${width}"`;
    if (!SHAPES[code]) return `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${r.toFixed(1)}" ${paint}/>`;
    const points = SHAPES[code].map(([dx, dy]) => `${(x + dx * r).toFixed(1)},${(y + dy * r).toFixed(1)}`);
    return `<path d="M${points.join("L")}Z" ${paint}/>`;
  }
  const dashArray = (dashes, width) => (dashes.length ? ` stroke-dasharray="${dashes.map((d) => +(d * width).toFixed(2)).join(",")}"` : "");

  /* A band's hatching, in its colour and at full strength: two bands that overlap interleave their
     lines and never mix into a colour no legend shows. Solid lines' bands lean one way, dashed
     lines' the other; `shift` sets apart the lines of bands that lean alike. */
  function hatchPattern(id, colour, dashed, shift) {
    return `<pattern id="${id}" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(${dashed ? -45 : 45}) translate(${(2 * shift) % 6},0)">` +
      `<line x1="0" y1="0" x2="0" y2="6" stroke="${colour}" stroke-width="1.3"/></pattern>`;
  }

  // Chart text grows with the chart and with the screen, read from further away the wider it is:
  // 12 px on a phone, 16 px or more on a 1920 px screen, at most 18.
  const chartFont = (W) => Math.round(Math.min(18, Math.max(12, W / 55, innerWidth / 120)));

  // Text width in the SVG's font, for laying out legends and axes without overlap.
  const measure = document.createElement("canvas").getContext("2d");
  function textWidth(text, size = 12, weight = 400) {
    measure.font = `${weight} ${size}px ${SVG_FONT}`;
    return measure.measureText(text).width;
  }

  // =================================================================================================
  // By hand: token weights
  // =================================================================================================
  const num = (id) => Number($(id).value);

  function message(container, kind, text) {
    const p = document.createElement("p");
    p.className = kind;
    p.textContent = text;
    $(container).append(p);
  }

  // Advantages of a binary-reward group with k successes out of G, by the simulator's own stages
  // (group_std for GRPO, none for Dr. GRPO) at std_eps = 0; a zero-variance group gets none.
  function groupStats(k, G) {
    const rewards = Array.from({ length: G }, (_, i) => (i < k ? 1 : 0));
    const byOutcome = (values) => (k === 0 || k === G ? { correct: 0, wrong: 0 } : { correct: values[0], wrong: values[G - 1] });
    const centredAll = toyrl.groupAdvantages("none", rewards);
    const std = Math.sqrt(centredAll.reduce((total, a) => total + a * a, 0) / G); // shown beside them
    return { mean: k / G, std, centred: byOutcome(centredAll), scaled: byOutcome(toyrl.groupAdvantages("group_std", rewards)) };
  }
  const groupMass = (advantage, k, G) => k * Math.abs(advantage.correct) + (G - k) * Math.abs(advantage.wrong);

  // k needs a correct and a wrong member here; a smaller G lowers it, and says so.
  function keepInRange(slider, low, high, note) {
    slider.min = String(low);
    slider.max = String(high);
    const asked = Number(slider.dataset.asked ?? slider.value);
    const k = Math.min(Math.max(asked, low), high);
    if (String(k) !== slider.value) slider.value = String(k);
    return { k, note: asked !== k ? note(asked, k) : "" };
  }

  function updateWeights(event) {
    const G = num("group");
    if (event?.target?.id === "correct") $("correct").dataset.asked = $("correct").value;
    const { k, note } = keepInRange($("correct"), 1, G - 1,
      (asked, k) => `k = ${asked} does not fit a group of ${G} with both a correct and a wrong response: shown with k = ${k}.`);
    const lenCorrect = num("len-correct"), lenWrong = num("len-wrong"), lenShort = num("len-short"), lnorm = num("lnorm");
    for (const [id, value] of [["len-correct", lenCorrect], ["len-wrong", lenWrong], ["len-short", lenShort], ["group", G], ["correct", k], ["lnorm", lnorm]]) {
      $(`${id}-out`).textContent = value;
    }
    const s = groupStats(k, G);
    show("group-mean", s.mean);
    show("group-std", s.std);
    const rows = {
      "grpo-correct": [s.scaled.correct, lenCorrect, lenCorrect],
      "grpo-wrong": [s.scaled.wrong, lenWrong, lenWrong],
      "grpo-short": [s.scaled.wrong, lenShort, lenShort],
      "dr-correct": [s.centred.correct, lnorm, lenCorrect],
      "dr-wrong": [s.centred.wrong, lnorm, lenWrong],
      "dr-short": [s.centred.wrong, lnorm, lenShort],
    };
    const weight = {}, total = {};
    for (const [key, [advantage, denominator, length]] of Object.entries(rows)) {
      const [method, response] = key.split("-");
      weight[key] = advantage / denominator;
      total[key] = weight[key] * length;
      show(`${method}-adv-${response}`, advantage);
      show(`${method}-w-${response}`, weight[key]);
      show(`${method}-total-${response}`, total[key]);
    }
    show("grpo-ratio", weight["grpo-correct"] / -weight["grpo-wrong"]);
    show("dr-ratio", weight["dr-correct"] / -weight["dr-wrong"]);
    drawPushDown(total["grpo-wrong"] / total["grpo-short"], total["dr-wrong"] / total["dr-short"], lenWrong, lenShort);
    $("weights-messages").replaceChildren();
    if (note) message("weights-messages", "warning", note);
    const longest = Math.max(lenCorrect, lenWrong, lenShort);
    if (lnorm < longest) {
      message("weights-messages", "warning", `L_norm = ${lnorm} is below the lengths it divides (up to ${longest} tokens): ` +
        "a response's total weight A \u00d7 |o| / L_norm then exceeds its advantage A. The paper uses the generation " +
        "budget, at least every length; being one constant, L_norm only rescales Dr. GRPO's step.");
    }
  }

  // Both methods on one scale: each wrong answer's total push-down in units of the short one's.
  function drawPushDown(grpoRatio, drRatio, lenWrong, lenShort) {
    show("grpo-push-ratio", grpoRatio);
    show("dr-push-ratio", drRatio);
    const largest = Math.max(1, grpoRatio, drRatio);
    const bar = (id, value) => { $(id).style.width = `${(9 * value) / largest}rem`; };
    bar("bar-grpo-short", 1); bar("bar-grpo-long", grpoRatio); bar("bar-dr-short", 1); bar("bar-dr-long", drRatio);
    const times = (r) => `${sig4(r)} times`;
    $("push-lesson").textContent = `Under GRPO the ${lenWrong}-token wrong answer gets ${times(grpoRatio)} the total push-down ` +
      `of the ${lenShort}-token one: the same at any length, so length is free. Under Dr. GRPO it gets ${times(drRatio)} ` +
      "as much: the push-down grows with length, every token of a failure counts.";
  }

  // =================================================================================================
  // By hand: the difficulty bias
  // =================================================================================================
  function updateDifficulty(event) {
    const G = num("d-group");
    if (event?.target?.id === "d-correct") $("d-correct").dataset.asked = $("d-correct").value;
    const { k, note } = keepInRange($("d-correct"), 0, G, (asked, k) => `k = ${asked} is more than G = ${G}: shown with k = ${k}.`);
    $("d-group-out").textContent = G;
    $("d-correct-out").textContent = k;
    $("d-rare-g").textContent = G;
    $("d-chart-g").textContent = G;
    const p = k / G;
    show("d-fraction-out", p);
    const s = groupStats(k, G);
    show("d-grpo-adv-correct", k > 0 ? s.scaled.correct : NaN);
    show("d-grpo-adv-wrong", k < G ? s.scaled.wrong : NaN);
    show("d-dr-adv-correct", k > 0 ? s.centred.correct : NaN);
    show("d-dr-adv-wrong", k < G ? s.centred.wrong : NaN);
    const grpoMass = groupMass(s.scaled, k, G), drMass = groupMass(s.centred, k, G);
    // A 50/50 group has std 0.5: mass G under GRPO, G/2 under Dr. GRPO.
    show("d-grpo-mass", grpoMass);
    show("d-grpo-rel", grpoMass / G);
    show("d-dr-mass", drMass);
    show("d-dr-rel", drMass / (G / 2));
    show("d-gradient-rel", (p * (1 - p)) / 0.25);
    const rare = groupStats(1, G);
    show("d-rare-grpo", (100 * groupMass(rare.scaled, 1, G)) / G);
    show("d-rare-dr", (100 * groupMass(rare.centred, 1, G)) / (G / 2));
    $("difficulty-messages").replaceChildren();
    if (note) message("difficulty-messages", "warning", note);
    drawDifficulty(G, k);
  }

  function drawDifficulty(G, current) {
    const box = $("difficulty-plot");
    const W = Math.max(240, Math.floor(box.clientWidth)), font = chartFont(W), u = font / 12;
    const yTicks = linearTicks(0, 1, 0.2), left = yAxisWidth(yTicks, font), right = 14 * u, top = 10 * u;
    const plotH = Math.round(Math.min(300, Math.max(170, W * 0.42)));
    const x = (v) => left + v * (W - left - right), y = (v) => top + plotH - v * plotH;
    const profile = (k, scaled) => {
      const s = groupStats(k, G);
      return scaled ? groupMass(s.scaled, k, G) / G : groupMass(s.centred, k, G) / (G / 2);
    };
    let svg = axes({ W, left, right, top, plotH, font, xTicks: linearTicks(0, 1, 0.2), yTicks, x, y,
      xLabel: "pass rate k/G", yLabel: "mass / mass at 50%" });
    const grid = Array.from({ length: 101 }, (_, i) => i / 100);
    svg += `<path d="${pathOf(grid.map((q) => [x(q), y(4 * q * (1 - q))]))}" fill="none" stroke="${MUTED}" stroke-width="${u}" stroke-dasharray="${2 * u},${3 * u}"/>`;
    const methods = [["grpo", true, LOOKS.article.grpo], ["dr", false, LOOKS.article.dr_grpo]];
    for (const [method, scaled, look] of methods) {
      const colour = look.colour, points = Array.from({ length: G + 1 }, (_, k) => [k, profile(k, scaled)]);
      svg += `<path d="${pathOf(points.map(([k, v]) => [x(k / G), y(v)]))}" fill="none" stroke="${colour}" stroke-width="${1.5 * u}"${dashArray(look.dashes, 1.5 * u)}/>`;
      for (const [k, v] of points) {
        const big = k === current;
        svg += `<circle class="mass-point" data-method="${method}" data-k="${k}" data-value="${v}" cx="${x(k / G).toFixed(1)}" cy="${y(v).toFixed(1)}" r="${(big ? 6 : G > 32 ? 2 : 3) * u}" fill="${big ? "#fff" : colour}" stroke="${colour}" stroke-width="${(big ? 3 : 1) * u}"/>`;
      }
    }
    const legend = layoutLegend([
      { label: "GRPO: 2\u221a(p(1\u2212p))", colour: LOOKS.article.grpo.colour, dashes: LOOKS.article.grpo.dashes, width: 1.5, marker: "o" },
      { label: "Dr. GRPO: 4p(1\u2212p)", colour: LOOKS.article.dr_grpo.colour, dashes: LOOKS.article.dr_grpo.dashes, width: 1.5, marker: "o" },
      { label: "exact gradient profile p(1\u2212p)/0.25", colour: MUTED, dashes: [2, 3], width: 1 },
      { label: "ring: the k above", colour: INK, ring: true },
    ], W, legendTop(top + plotH, u), font);
    const H = legend.bottom + 6 * u;
    box.innerHTML = svgRoot(W, H, `update mass against pass rate for G = ${G}`, svg + legend.svg, font);
  }

  // =================================================================================================
  // SVG pieces shared by the charts
  // =================================================================================================
  function svgRoot(W, H, label, body, font = 12) {
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${Math.ceil(H)}" viewBox="0 0 ${W} ${Math.ceil(H)}" role="img" ` +
      `aria-label="${escapeXml(label)}" font-family="${escapeXml(SVG_FONT)}" font-size="${font}">` +
      `<rect width="${W}" height="${Math.ceil(H)}" fill="#ffffff"/>${body}</svg>`;
  }

  // "M x,y L ..." with a break wherever a value is missing.
  function pathOf(points) {
    let d = "", pen = false;
    for (const [px, py] of points) {
      if (!Number.isFinite(py)) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`;
      pen = true;
    }
    return d;
  }

  // The left margin: the y label's line, the widest tick label and a gap.
  const yAxisWidth = (ticks, font) => Math.ceil(1.6 * font + Math.max(0, ...ticks.map((t) => textWidth(t.text, font))) + font / 2);

  /* Axes with their ticks ({value, text}) and labels, every size in proportion to `font`. */
  function axes({ W, left, right, top, plotH, font, xTicks, yTicks, x, y, xLabel, yLabel }) {
    const bottom = top + plotH, u = font / 12;
    let svg = "";
    for (const t of yTicks) {
      svg += `<line x1="${left}" y1="${y(t.value).toFixed(1)}" x2="${W - right}" y2="${y(t.value).toFixed(1)}" stroke="${GRID}"/>` +
        `<text class="tick-y" data-value="${t.value}" x="${left - 6 * u}" y="${(y(t.value) + 4 * u).toFixed(1)}" text-anchor="end" fill="${INK}">${t.text}</text>`;
    }
    for (const t of xTicks) {
      svg += `<line x1="${x(t.value).toFixed(1)}" y1="${bottom}" x2="${x(t.value).toFixed(1)}" y2="${bottom + 4 * u}" stroke="${AXIS}"/>` +
        `<text class="tick-x" x="${x(t.value).toFixed(1)}" y="${bottom + 17 * u}" text-anchor="middle" fill="${INK}">${t.text}</text>`;
    }
    svg += `<rect class="plot-area" x="${left}" y="${top}" width="${W - right - left}" height="${plotH}" fill="none"/>` +
      `<line x1="${left}" y1="${bottom}" x2="${W - right}" y2="${bottom}" stroke="${AXIS}"/>` +
      `<line x1="${left}" y1="${top}" x2="${left}" y2="${bottom}" stroke="${AXIS}"/>` +
      `<text x="${(left + W - right) / 2}" y="${bottom + 34 * u}" text-anchor="middle" fill="${INK}">${escapeXml(xLabel)}</text>` +
      `<text x="${font}" y="${top + plotH / 2}" transform="rotate(-90 ${font} ${top + plotH / 2})" text-anchor="middle" fill="${INK}">${escapeXml(yLabel)}</text>`;
    return svg;
  }

  // A legend's first baseline under a plot area ending at `bottom`: below the x label's descenders
  // (its baseline at bottom + 34u) by a row's ascent and a gap, so no axis text touches a legend.
  const legendTop = (bottom, u) => bottom + 54 * u;

  /* A legend below the plot area, entries wrapped in rows to the width: never over data.
     entry: {label, colour, dashes, width, hatch (a pattern's id), ring, marker, line}. */
  function layoutLegend(entries, W, top, font = 12) {
    const u = font / 12, rowHeight = 1.5 * font, swatch = 28 * u, gap = 16 * u;
    let svg = "", px = 8, py = top;
    for (const entry of entries) {
      const { label } = entry;
      const width = swatch + 6 * u + textWidth(label, font) + gap;
      if (px > 8 && px + width > W - 4) { px = 8; py += rowHeight; }
      const mid = py - 0.35 * font;
      if (entry.hatch) {
        svg += `<rect x="${px}" y="${(mid - 5 * u).toFixed(1)}" width="${swatch}" height="${10 * u}" fill="url(#${entry.hatch})" stroke="${entry.colour}" stroke-width="0.6"/>`;
      } else if (entry.ring) {
        svg += `<circle cx="${px + swatch / 2}" cy="${mid.toFixed(1)}" r="${5 * u}" fill="#fff" stroke="${entry.colour}" stroke-width="${2.5 * u}"/>`;
      } else {
        const width = (entry.width ?? 2.5) * u;
        if (entry.line !== false) svg += `<line x1="${px}" y1="${mid.toFixed(1)}" x2="${px + swatch}" y2="${mid.toFixed(1)}" stroke="${entry.colour}" stroke-width="${width}"${dashArray(entry.dashes ?? [], width)}/>`;
        if (entry.marker) svg += markerSvg(entry.marker, px + swatch / 2, mid, 3.6 * u, entry.colour);
      }
      svg += `<text x="${(px + swatch + 6 * u).toFixed(1)}" y="${py.toFixed(1)}" fill="${INK}">${escapeXml(label)}</text>`;
      px += width;
    }
    return { svg: `<g class="legend">${svg}</g>`, bottom: py + 6 * u };
  }

  // =================================================================================================
  // The run: its controls and state
  // =================================================================================================
  /* The training settings: a Config field each (hash key = field name), with the input's range
     for its arrows. Nothing is clamped: a value the simulator refuses is shown with its message. */
  const SETTINGS = [
    { key: "lr", label: "learning rate", min: 0, max: 1, step: 0.001 },
    { key: "group_size", label: "group size G", min: 2, max: 64, step: 1 },
    { key: "batch_prompts", label: "prompts a step B", min: 1, max: 64, step: 1 },
    { key: "cap", label: "cap (tokens)", min: 0, max: 10000, step: 100 },
    { key: "min_length", label: "min_length (tokens)", min: 0, max: 10000, step: 10 },
    { key: "length_norm", label: "L_norm (0: the cap)", min: 0, max: 10000, step: 100 },
    { key: "prompt_logit_mean", label: "\u03c8 mean", min: -6, max: 6, step: 0.1 },
    { key: "prompt_logit_std", label: "\u03c8 std", min: 0, max: 4, step: 0.1 },
    { key: "seeds", label: "seeds", min: 1, max: 16, step: 1 },
    { key: "steps", label: "steps", min: 0, max: 5000, step: 10 },
  ];
  const DEFAULT_SEEDS = 6; // the article's run
  const settingDefault = (key) => (key === "seeds" ? DEFAULT_SEEDS : DATA.config[key].default);
  const settingHelp = (key) => (key === "seeds" ? "Seeds 0..n-1, one run per seed and variant." : DATA.config[key].help);
  const LIMITS = DATA.limits;
  // A value as the user wrote it, for a message: a number as typed, anything else quoted.
  const written = (text) => (text.trim() !== "" && Number.isFinite(Number(text)) ? text.trim() : JSON.stringify(text));

  const state = {
    variants: [...ARTICLE],
    mode: "sampled",
    focus: "all",
    overlay: false,
    cursor: null, // a step, or null: follow the last trained step
  };
  let run = null, runSpecUsed = null, runVariants = [], playing = false, hashTimer = 0, lastDrawn = 0;
  const recorded = DATA.recorded;
  const presetByName = new Map(toyrl.presets.map((p) => [p.name, p]));

  function buildSettings() {
    const box = $("settings");
    for (const s of SETTINGS) {
      const id = `set-${s.key}`;
      box.insertAdjacentHTML("beforeend",
        `<div class="field"><label for="${id}">${escapeXml(s.label)}</label>` +
        `<input type="number" id="${id}" data-key="${s.key}" min="${s.min}" max="${s.max}" step="${s.step}" ` +
        `value="${settingDefault(s.key)}" aria-describedby="${id}-help">` +
        `<span class="help" id="${id}-help">${escapeXml(settingHelp(s.key))}</span></div>`);
    }
  }

  function buildPresetPicker() {
    const picker = $("preset-picker");
    picker.innerHTML = '<option value="">choose a preset\u2026</option>';
    const bySource = new Map();
    for (const preset of toyrl.presets) {
      if (!preset.source) continue; // the article's four are the switches
      if (!bySource.has(preset.source)) bySource.set(preset.source, []);
      bySource.get(preset.source).push(preset);
    }
    for (const [source, presets] of bySource) {
      const group = document.createElement("optgroup");
      group.label = source;
      for (const preset of presets) {
        const option = new Option(preset.name, preset.name);
        if (preset.page) {
          option.disabled = true;
          option.textContent = `${preset.name} (not on this page: ${preset.page})`;
        } else if (preset.page_mean_field) {
          option.textContent = `${preset.name} (sampled only)`;
        }
        group.append(option);
      }
      picker.append(group);
    }
  }

  function buildPresetTable() {
    const rows = toyrl.presets.map((p) => {
      const page = p.page ? `no: ${p.page}` : p.page_mean_field ? `sampled only (mean-field: ${p.page_mean_field})` : "yes, sampled and mean-field";
      const source = p.source || "the article";
      const cells = [["name", p.name], ["spec", p.spec_text], ["stands for", p.stands_for || p.summary], ["source", source], ["on this page", page], ["shown as", variantLabel(p.name)]];
      return `<tr>${cells.map(([label, value]) => `<td data-label="${label}"${label === "spec" ? ' class="spec"' : ""}>${escapeXml(value)}</td>`).join("")}</tr>`;
    });
    $("preset-table").innerHTML = '<thead><tr><th scope="col">name</th><th scope="col">spec</th><th scope="col">stands for</th>' +
      `<th scope="col">source</th><th scope="col">on this page</th><th scope="col">shown as</th></tr></thead><tbody>${rows.join("")}</tbody>`;
    $("preset-sources").innerHTML = Object.entries(DATA.sources).map(([key, text]) => `<li><b>${escapeXml(key)}</b>: ${escapeXml(text)}</li>`).join("");
  }

  /* toyrl's documents: links where the page was written beside them (a repository's figures/),
     else named with their paths in the repository, in plain text: no link from the page breaks. */
  function buildDocs() {
    const docs = DATA.docs.map((d) => (d.href ? `<a href="${escapeXml(d.href)}">${escapeXml(d.title)}</a>`
      : `${escapeXml(d.title)} (<code>${escapeXml(d.path)}</code>)`));
    $("docs-note").innerHTML = `toyrl's documentation, in its source repository: ${docs.join(", ")}.`;
  }

  function buildOverlayControl() {
    if (!recorded) return;
    $("overlay-box").innerHTML = '<label class="inline"><input type="checkbox" id="overlay"> ' +
      `overlay recorded curves: ${escapeXml(recorded.description)} (mean of ${recorded.seeds} seeds)</label>`;
  }

  // The chosen variants in the order chosen (a link's order, or the order added), each once.
  function setVariants(names) {
    state.variants = [...new Set(names)];
  }

  function syncControls() {
    for (const button of document.querySelectorAll(".switch")) {
      button.setAttribute("aria-pressed", String(state.variants.includes(button.dataset.variant)));
    }
    const chips = $("preset-chips");
    chips.replaceChildren();
    for (const name of state.variants.filter((n) => !ARTICLE.includes(n))) {
      const item = document.createElement("li");
      item.textContent = variantLabel(name);
      const remove = document.createElement("button");
      remove.type = "button";
      remove.textContent = "\u00d7";
      remove.setAttribute("aria-label", `remove ${name}`);
      remove.addEventListener("click", () => { setVariants(state.variants.filter((n) => n !== name)); changed(); });
      item.append(remove);
      chips.append(item);
    }
    $("mode-sampled").checked = state.mode === "sampled";
    $("mode-mean-field").checked = state.mode === "mean_field";
    const focus = $("length-focus");
    focus.replaceChildren(new Option("every chosen variant", "all"));
    for (const name of state.variants) focus.append(new Option(`only ${variantLabel(name)}`, name));
    if (!state.variants.includes(state.focus)) state.focus = "all";
    focus.value = state.focus;
    if ($("overlay")) $("overlay").checked = state.overlay;
  }

  // What a setting's box holds as written: a link's text that is no number (which the box itself
  // would show as empty) is kept, so that a message can quote it.
  const settingText = (key) => { const input = $(`set-${key}`); return input.value === "" ? input.dataset.typed ?? "" : input.value; };

  // The settings as typed: a number, or the text itself when it is none (the check says why).
  function settingValues() {
    const values = {};
    for (const s of SETTINGS) {
      const text = settingText(s.key).trim();
      values[s.key] = text === "" || !Number.isFinite(Number(text)) ? text : Number(text);
    }
    return values;
  }

  /* Each setting in its own range (Python's, from the data; seeds: toyrl run's), quoting what was
     written: [] or one line per bad setting. */
  function settingErrors(values) {
    const errors = [];
    for (const s of SETTINGS) {
      const shown = written(settingText(s.key));
      if (s.key === "seeds") {
        const v = values.seeds;
        if (!(Number.isInteger(v) && v >= 1 && v <= LIMITS.max_seeds)) errors.push(`seeds must be an integer in 1..${LIMITS.max_seeds.toLocaleString("en")} (got ${shown})`);
        continue;
      }
      try {
        toyrl.checkSetting(s.key, values[s.key], shown);
      } catch (error) {
        errors.push(error.message);
      }
    }
    return errors;
  }

  function runSpec(values) {
    const spec = { variants: state.variants, mean_field: state.mode === "mean_field" };
    for (const [key, value] of Object.entries(values)) spec[key] = value;
    return spec;
  }

  /* Words where a value is valid but leaves the range the toy is meaningful in. */
  function warnings(v) {
    const out = [];
    const finite = (x) => typeof x === "number" && Number.isFinite(x);
    if (finite(v.lr) && v.lr > 2.5 * ARTICLE_SCALE_LR) {
      out.push(`lr = ${v.lr} is ${sig4(v.lr / ARTICLE_SCALE_LR)} times the article's ${ARTICLE_SCALE_LR}: Adam's steps this large can overshoot, so the curves may jump rather than drift.`);
    } else if (finite(v.lr) && v.lr > 0 && v.lr < ARTICLE_SCALE_LR / 10) {
      out.push(`lr = ${v.lr} is ${sig4(ARTICLE_SCALE_LR / v.lr)} times below the article's ${ARTICLE_SCALE_LR}: little will move in ${v.steps} steps.`);
    }
    if (finite(v.cap) && finite(v.length_norm) && v.length_norm > 0 && v.length_norm < v.cap) {
      out.push(`L_norm = ${v.length_norm} is below the lengths it divides (up to the cap, ${v.cap.toLocaleString("en")} tokens). ` +
        "It is one constant for every response, so it only rescales the step, and Adam mostly cancels a rescaled gradient; the article uses the cap.");
    }
    if (finite(v.cap) && finite(v.min_length) && v.min_length <= v.cap && v.min_length > 0.5 * v.cap) {
      out.push(`min_length = ${v.min_length} is near the cap (${v.cap}): few right-approach answers can run that long and still stop before the cap, so correct answers are rare and the length curves of correct answers are noisy.`);
    }
    if (finite(v.cap) && v.cap < 1 / DATA.config.stop_prob_right.default) {
      out.push(`cap = ${v.cap} is below the initial expected length of a right-approach answer (${Math.round(1 / DATA.config.stop_prob_right.default)} tokens): many right answers are truncated from the start.`);
    }
    if (finite(v.prompt_logit_mean) && Math.abs(v.prompt_logit_mean) > 4) {
      const share = 100 / (1 + Math.exp(-v.prompt_logit_mean));
      out.push(`\u03c8 mean = ${v.prompt_logit_mean}: a typical prompt takes the right approach ${share.toFixed(share < 1 || share > 99 ? 2 : 0)}% of the time, so most groups have equal rewards and get no update.`);
    }
    if (finite(v.group_size) && v.group_size > 64) out.push(`G = ${v.group_size} is above 64, the largest group the article discusses; each step samples ${v.group_size} responses per prompt and trains slowly.`);
    const { bytes, seconds, worst } = toyrl.footprint(runSpec(v)); // what the run holds, what a step takes (sim.js)
    const runs = state.variants.length * v.seeds;
    if (bytes > 100e6) out.push(`The page keeps every step of every run: about ${Math.ceil(bytes / 1e6).toLocaleString("en")} MB for ${v.steps.toLocaleString("en")} steps of ${runs.toLocaleString("en")} runs; fewer steps or seeds keep it responsive.`);
    const time = (s) => `${s < 1 ? s.toFixed(1) : Math.round(s).toLocaleString("en")} s`;
    if (worst > 0.25) out.push(`Each step of the ${runs.toLocaleString("en")} runs takes about ${time(seconds)}${worst > 2 * seconds ? ` (up to ${time(worst)}, the token budget's layout trying every count it may)` : ""}, all at once: the page answers between steps only.`);
    return out;
  }

  // A control changed: a new run from step 0, paused.
  function changed() {
    syncControls();
    startRun();
    draw();
    scheduleHash();
  }

  /* A new run from the controls, paused at step 0; none, and every reason said, if a setting or a
     link's field (`refused`, one line each) is out of its range. */
  function startRun(refused = []) {
    pause();
    state.cursor = null;
    const values = settingValues();
    $("run-messages").replaceChildren();
    run = null;
    runSpecUsed = null;
    runVariants = [];
    const errors = [...settingErrors(values), ...refused];
    if (errors.length) { // one message, every reason in it: a link's bad fields are fixed in one go
      const numbered = errors.length > 1 ? errors.map((text, i) => `(${i + 1}) ${text}`) : errors;
      message("run-messages", "error", `Not started: ${numbered.join("; ")}`);
      return;
    }
    if (state.variants.length === 0) {
      message("run-messages", "error", "Choose at least one variant: a cell of the 2 \u00d7 2 or a preset.");
      return;
    }
    const spec = runSpec(values);
    try {
      run = toyrl.start(spec); // throws an Error naming the bad field and its valid range
    } catch (error) {
      message("run-messages", "error", `Not started: ${error.message}`);
      return;
    }
    for (const text of warnings(values)) message("run-messages", "warning", text);
    runSpecUsed = spec;
    runVariants = [...state.variants];
  }

  // =================================================================================================
  // Training: play, pause, step, reset
  // =================================================================================================
  const FRAME_BUDGET_MS = 12; // of a 16.7 ms frame, so the page stays responsive while it trains

  function play() {
    if (!run || run.done) return;
    playing = true;
    $("play").textContent = "pause";
    $("play").setAttribute("aria-label", "pause training");
    $("lesson").setAttribute("aria-live", "off"); // a screen reader hears the lesson once the run stops
    requestAnimationFrame(frame);
  }

  function pause() {
    if (!playing) return;
    playing = false;
    $("play").textContent = "play";
    $("play").setAttribute("aria-label", "play: train live");
    $("lesson").setAttribute("aria-live", "polite");
    if (run) drawLesson(); // written again, now heard
    scheduleHash();
  }

  // A few steps a frame: the whole run animates over some seconds, and never blocks for long.
  function frame() {
    if (!playing || !run) return;
    const perFrame = Math.max(1, Math.ceil(run.steps / 120));
    const started = performance.now();
    for (let n = 0; n < perFrame && !run.done && performance.now() - started < FRAME_BUDGET_MS; n++) run.advance(1);
    // Drawing costs more than a frame's training: about 20 redraws a second are smooth enough.
    if (run.done || started - lastDrawn > 45) { draw(); lastDrawn = performance.now(); }
    if (run.done) pause();
    else requestAnimationFrame(frame);
  }

  /* Train up to step t in slices of the frame budget (a restored link), then call `then`. */
  function trainTo(t, then) {
    const slice = () => {
      const started = performance.now();
      while (run && run.t < t && !run.done && performance.now() - started < 4 * FRAME_BUDGET_MS) run.advance(1);
      if (run && run.t < t && !run.done) setTimeout(slice, 0);
      else then();
    };
    slice();
  }

  // =================================================================================================
  // The run's charts
  // =================================================================================================
  /* The charts. A chart of one metric draws each variant in its figures' look (colour, line style,
     marker); a chart of two draws each variant's colour and line style, and the metric's marker (the
     figures' outcome markers: circles right, squares wrong); the length chart (`panels`) draws a
     panel per variant, in the outcomes' colours (drawPanels). Each curve's end is labelled. */
  const CHARTS = {
    "chart-length": {
      title: "response length by correctness", yLabel: "tokens", scale: 1, format: tokens, cap: true, panels: true,
      metrics: [
        { column: "length_correct", label: "E[L | correct]", outcome: "correct" },
        { column: "length_incorrect", label: "E[L | incorrect]", outcome: "incorrect" },
      ],
    },
    "chart-accuracy": {
      title: "accuracy", yLabel: "accuracy (%)", scale: 100, format: (v) => `${v.toFixed(1)}%`,
      metrics: [{ column: "accuracy", label: "accuracy" }],
    },
    "chart-stop": {
      title: "stop probabilities", yLabel: "stop probability / token", scale: 1, log: true,
      format: oneIn, spread: (sd, mean) => `${(100 * sd / mean).toFixed(sd < 0.1 * mean ? 1 : 0)}%`,
      metrics: [
        { column: "stop_prob_right", label: "\u03c3(\u03c6c), right approach", outcome: "correct", tag: "right" },
        { column: "stop_prob_wrong", label: "\u03c3(\u03c6w), wrong approach", outcome: "incorrect", tag: "wrong" },
      ],
    },
  };
  const geometry = {}; // per chart: its columns of plots' x mappings, for the pointer

  const cursorStep = () => (run ? Math.min(state.cursor ?? run.t, run.t) : 0);

  /* Mean and sample sd over seeds of one variant's runs, steps 0..run.t, extended as the run
     trains (a cache per run: every draw reads them many times). */
  let statsCache = new Map(), statsRun = null;
  function stats(column, index) {
    if (statsRun !== run) { statsCache = new Map(); statsRun = run; }
    const key = `${column}/${index}`;
    let entry = statsCache.get(key);
    if (!entry) {
      entry = { mean: new Float64Array(run.steps + 1).fill(NaN), sd: new Float64Array(run.steps + 1).fill(NaN), upTo: -1 };
      statsCache.set(key, entry);
    }
    const values = run.column(column), rows = rowsOf(index);
    for (let s = entry.upTo + 1; s <= run.t; s++) {
      let n = 0, sum = 0, squares = 0;
      for (const r of rows) { const v = values[r][s]; if (Number.isFinite(v)) { n++; sum += v; } }
      const mean = n ? sum / n : NaN;
      for (const r of rows) { const v = values[r][s]; if (Number.isFinite(v)) squares += (v - mean) ** 2; } // two passes: no cancellation
      entry.mean[s] = mean;
      entry.sd[s] = n > 1 ? Math.sqrt(squares / (n - 1)) : NaN;
    }
    entry.upTo = run.t;
    return entry;
  }

  const seedCount = () => (run ? run.runs.length / runVariants.length : 0);
  const rowsOf = (index) => Array.from({ length: seedCount() }, (_, s) => index * seedCount() + s); // variants outer, seeds inner

  function shownVariants(chartId) {
    const all = runVariants.map((name, index) => ({ name, index }));
    return chartId === "chart-length" && state.focus !== "all" ? all.filter((v) => v.name === state.focus) : all;
  }

  // A recorded curve: each step's change from the last finite step, in whole numbers of 1/unit
  // (toyrl.explore.run_data); a step whose mean is not finite (a diverged run) is null, NaN here (a gap).
  function recordedValues(name, column) {
    let total = 0;
    return recorded.curves[name][column].map((change) => (change === null ? NaN : (total += change) / recorded.units[column]));
  }

  function recordedCurves(chartId) {
    if (!recorded || !state.overlay) return [];
    const chart = CHARTS[chartId];
    return shownVariants(chartId).filter((v) => recorded.curves[v.name]).flatMap((v) =>
      chart.metrics.filter((m) => recorded.curves[v.name][m.column]).map((m) => ({ ...v, metric: m, values: recordedValues(v.name, m.column) })));
  }

  // Bands as in the figures: over several seeds, for at most toyrl.plots.MAX_BANDS variants.
  const banded = () => seedCount() > 1 && runVariants.length <= LOOKS.max_bands;

  function bandNote() {
    const seeds = seedCount();
    if (!run) return "";
    if (seeds < 2) return "one seed: no band";
    return `lines: mean over ${seeds} seeds; ` + (banded() ? `bands: mean \u00b1 1 sd over ${seeds} seeds (sample sd)`
      : `no bands over ${LOOKS.max_bands} variants (the readouts give the sd)`);
  }

  // Markers about every eighth of a run, staggered across curves so that twins show both (toyrl.plots' _markevery).
  function markSteps(points, index, count, upTo) {
    const every = Math.max(1, Math.floor(points / 8)), out = [];
    for (let i = Math.floor((index * every) / Math.max(count, 1)) % every; i <= upTo; i += every) out.push(i);
    return out;
  }

  /* Each curve of a chart: its variant, metric, look as drawn and statistics. The length chart
     draws every variant in the outcomes' looks (its panels name the variant): E[L | correct] solid,
     E[L | incorrect] dashed, in the outcomes' colours, as toyrl.plots' length panel. */
  const OUTCOME_DASHES = { correct: [], incorrect: [3.7, 1.6] }; // matplotlib's "-" and "--", in line widths
  function chartSeries(chartId) {
    const chart = CHARTS[chartId], looks = variantLooks(runVariants);
    return shownVariants(chartId).flatMap((v) => chart.metrics.map((m) => {
      const look = looks[v.index], outcome = OUTCOMES[m.outcome];
      const drawn = chart.panels ? { colour: outcome.colour, dashes: OUTCOME_DASHES[m.outcome], marker: null }
        : !outcome ? look : { colour: look.colour, dashes: look.dashes, marker: outcome.marker };
      return { ...v, metric: m, look: drawn, ...stats(m.column, v.index) };
    }));
  }

  /* The y axis: linear from 0 to a round value above everything drawn (and the cap, on the length
     chart), or, for probabilities, logarithmic between ticks 1/N around everything drawn. */
  function yScale(chart, series, overlay, t, top, plotH) {
    const bottom = top + plotH;
    if (chart.log) {
      let low = Infinity, high = 0;
      for (const s of series) {
        for (let i = 0; i <= t; i++) {
          const sd = Number.isFinite(s.sd[i]) && banded() ? s.sd[i] : 0;
          for (const v of [s.mean[i] + sd, s.mean[i] - sd, s.mean[i]]) if (v > 0 && Number.isFinite(v)) { low = Math.min(low, v); high = Math.max(high, v); }
        }
      }
      if (!(high > 0)) { low = 1e-3; high = 1e-2; }
      const ticks = logTicks(low, high), from = Math.log(ticks.at(-1).value), span = Math.log(ticks[0].value) - from;
      return { ticks, y: (v) => (v > 0 ? bottom - ((Math.log(v) - from) / span) * plotH : NaN) };
    }
    let high = chart.cap ? runSpecUsed.cap : 0;
    for (const s of series) for (let i = 0; i <= t; i++) high = Math.max(high, (s.mean[i] + (Number.isFinite(s.sd[i]) ? s.sd[i] : 0)) * chart.scale || 0);
    for (const o of overlay) for (const v of o.values) if (Number.isFinite(v)) high = Math.max(high, v * chart.scale);
    if (!(high > 0)) high = 1;
    const yStep = tickStep(high, plotH > 240 ? 6 : 4), yTop = Math.ceil(high / yStep - 1e-9) * yStep;
    return { ticks: linearTicks(0, yTop, yStep), y: (v) => bottom - (v / yTop) * plotH };
  }

  /* A text's lines of at most `width` px where its pieces allow, broken after a space or an
     underscore (a preset's name, openrlhf_reinforce_baseline, breaks too). */
  const pieces = (text) => text.split(/(?<=[ _])/);
  function wrapWords(text, width, font, weight = 400) {
    const lines = [];
    for (const piece of pieces(text)) {
      const joined = lines.length ? lines.at(-1) + piece : piece;
      if (lines.length && textWidth(joined.trimEnd(), font, weight) <= width) lines[lines.length - 1] = joined;
      else lines.push(piece);
    }
    return lines.map((line) => line.trimEnd());
  }
  const widestLine = (texts, width, font) => Math.max(0, ...texts.flatMap((t) => wrapWords(t, width, font)).map((l) => textWidth(l, font)));
  const widestPiece = (texts, font) => Math.max(0, ...texts.flatMap(pieces).map((w) => textWidth(w.trimEnd(), font)));

  // The last step up to t where a curve has a value: its label sits there, by the data.
  function lastFinite(values, t) {
    for (let i = t; i >= 0; i--) if (Number.isFinite(values[i])) return i;
    return -1;
  }

  const LINE = 1.3; // a line of text in a chart, in font sizes: a glyph's box with descenders is 1.25

  /* Labels at the ends of curves, never over one another and within [low, high] (when they fit:
     `needed` is the height they take). item: {x, y: the curve's last drawn point, text, prefix
     (before the text: which of a variant's curves), order (of the texts in a merged label), colour,
     variant, column}. A label starts `gap` right of its curve's end; with `merge`, the labels of
     curves of one column that end at one point (within a third of a line) become one ("GRPO, GRPO
     without std division"); the others are spread apart vertically, each joined to its curve's end
     by a thin leader line in the curve's colour where moved. Lines wrap at `wrap` px. */
  function endLabels(items, { low, high, font, gap, wrap, merge }) {
    const u = font / 12, lineHeight = LINE * font, pad = 0.3 * font;
    const groups = [];
    for (const item of items.filter((it) => Number.isFinite(it.y)).sort((a, b) => a.y - b.y)) {
      const last = groups.at(-1);
      if (merge && last && item.column === last.items[0].column && item.y - last.items.at(-1).y < font / 3) last.items.push(item);
      else groups.push({ items: [item] });
    }
    for (const g of groups) {
      const names = [...new Set([...g.items].sort((a, b) => a.order - b.order).map((it) => it.text))].join(", ");
      g.lines = wrapWords((g.items[0].prefix ?? "") + names, wrap, font);
      g.x = Math.max(...g.items.map((it) => it.x));
      g.y = g.items.reduce((total, it) => total + it.y, 0) / g.items.length;
      g.height = g.lines.length * lineHeight;
      g.top = g.y - g.height / 2;
    }
    // down from the first, back up from `high`, down again from `low`: apart, and within the range
    const apart = () => { for (let i = 1; i < groups.length; i++) groups[i].top = Math.max(groups[i].top, groups[i - 1].top + groups[i - 1].height + pad); };
    apart();
    if (groups.length) groups.at(-1).top = Math.min(groups.at(-1).top, high - groups.at(-1).height);
    for (let i = groups.length - 2; i >= 0; i--) groups[i].top = Math.min(groups[i].top, groups[i + 1].top - pad - groups[i].height);
    if (groups.length) groups[0].top = Math.max(groups[0].top, low);
    apart();
    let svg = "";
    for (const g of groups) {
      const x = g.x + gap, middle = g.top + g.height / 2;
      for (const it of g.items) {
        if (Math.abs(middle - it.y) > 0.2 * font || g.items.length > 1) {
          svg += `<line class="leader" x1="${(it.x + 2 * u).toFixed(1)}" y1="${it.y.toFixed(1)}" x2="${(x - 2 * u).toFixed(1)}" y2="${middle.toFixed(1)}" stroke="${it.colour}" stroke-width="${0.8 * u}"/>`;
        }
      }
      const lines = g.lines.map((line, i) => `<tspan x="${x.toFixed(1)}" y="${(g.top + i * lineHeight + 0.95 * font).toFixed(1)}">${escapeXml(line)}</tspan>`).join("");
      svg += `<text class="end-label" data-variant="${escapeXml(g.items.map((it) => it.variant).join(","))}" data-column="${g.items.map((it) => it.column).join(",")}" fill="${INK}">${lines}</text>`;
    }
    const needed = groups.reduce((total, g) => total + g.height, 0) + pad * Math.max(0, groups.length - 1);
    return { svg, needed };
  }

  // A band of mean +- 1 sd over steps 0..t, hatched in its curve's colour, never translucent.
  function bandSvg(id, s, shift, x, yIn, t) {
    const upper = [], lower = [];
    for (let i = 0; i <= t; i++) {
      if (!Number.isFinite(s.mean[i]) || !Number.isFinite(s.sd[i])) continue;
      upper.push([x(i), yIn(s.mean[i] + s.sd[i])]);
      lower.push([x(i), yIn(s.mean[i] - s.sd[i])]);
    }
    if (upper.length < 2) return { defs: "", svg: "" };
    return { defs: hatchPattern(id, s.look.colour, s.look.dashes.length > 0, shift), svg: `<path class="band" d="${pathOf([...upper, ...lower.reverse()])}Z" fill="url(#${id})" stroke="none"/>` };
  }

  const cursorCircle = (s, cx, cy, u) => `<circle class="at-cursor" data-variant="${escapeXml(s.name)}" data-column="${s.metric.column}" data-value="${s.mean[cursorStep()]}" ` +
    `cx="${cx.toFixed(1)}" cy="${cy.toFixed(1)}" r="${3.5 * u}" fill="#fff" stroke="${s.look.colour}" stroke-width="${2 * u}"/>`;

  function finishChart(chartId, W, H, body) {
    const box = $(chartId), chart = CHARTS[chartId], cursor = cursorStep();
    box.innerHTML = svgRoot(W, H, `${chart.title}, step ${cursor} of ${run.steps}`, body, chartFont(W));
    box.setAttribute("aria-valuemax", String(run.t));
    box.setAttribute("aria-valuenow", String(cursor));
    box.setAttribute("aria-valuetext", `step ${cursor}`);
  }

  function drawChart(chartId, W) {
    const box = $(chartId), chart = CHARTS[chartId], font = chartFont(W), u = font / 12;
    if (!run) {
      box.innerHTML = svgRoot(W, 3 * font, chart.title, `<text x="10" y="${2 * font}" fill="${INK}">No run: see the message under play.</text>`, font);
      return;
    }
    if (chart.panels) { drawPanels(chartId, W); return; }
    const T = run.steps, t = run.t, cursor = cursorStep();
    const series = chartSeries(chartId), overlay = recordedCurves(chartId);
    // Each curve's end labelled with its variant's name: the right margin holds the widest, wrapped.
    const prefix = (s) => (chart.metrics.length > 1 ? `${s.metric.tag}: ` : ""); // which of a variant's curves
    const names = series.map((s) => prefix(s) + variantLabel(s.name));
    const wrap = Math.max(widestPiece(names, font), Math.min(0.3 * W, 190 * u)), gap = 10 * u;
    const right = gap + widestLine(names, wrap, font) + 6 * u, top = 22 * u;
    const layout = (plotH) => {
      const scale = yScale(chart, series, overlay, t, top, plotH), left = yAxisWidth(scale.ticks, font);
      const x = (s) => left + (s / T) * (W - left - right), y = (v) => scale.y(v * chart.scale);
      const items = series.map((s) => {
        const i = lastFinite(s.mean, t);
        return { x: x(Math.max(i, 0)), y: i < 0 ? NaN : y(s.mean[i]), text: variantLabel(s.name), prefix: prefix(s), order: s.index, colour: s.look.colour, variant: s.name, column: s.metric.column };
      });
      const labels = endLabels(items, { low: top, high: top + plotH, font, gap, wrap, merge: true });
      return { plotH, scale, left, x, y, labels };
    };
    // taller where the labels need it (8 variants' two curves on a phone's width)
    let laid = layout(Math.round(Math.min(380, Math.max(170, W * 0.4))));
    for (let attempt = 0; attempt < 3 && laid.labels.needed > laid.plotH; attempt++) laid = layout(Math.ceil(laid.labels.needed));
    const { plotH, scale, left, x, y, labels } = laid, bottom = top + plotH;
    const yIn = (v) => Math.min(bottom, Math.max(top, Number.isFinite(y(v)) ? y(v) : bottom));
    const xStep = tickStep(T, W > 700 ? 8 : W > 420 ? 5 : 3);
    geometry[chartId] = { columns: [{ left, width: W - left - right }], T };
    let svg = axes({ W, left, right, top, plotH, font, xTicks: linearTicks(0, T, xStep), yTicks: scale.ticks, x, y: scale.y,
      xLabel: "training step", yLabel: chart.yLabel });
    svg += `<rect class="panel-box" x="${left}" y="${top}" width="${W - left}" height="${plotH}" fill="none"/>`;
    // Solid lines first, dashed ones over them (as in the figures), each later variant thinner: twins both show.
    const order = series.map((s, k) => ({ s, k, width: Math.max(1.4, 3.4 - 0.5 * s.index) * u }))
      .sort((a, b) => (a.s.look.dashes.length > 0) - (b.s.look.dashes.length > 0) || a.k - b.k);
    let defs = "";
    if (banded()) { // bands first, under every line: hatched, never translucent
      for (const { s, k } of order) { const band = bandSvg(`${chartId}-hatch-${k}`, s, k, x, yIn, t); defs += band.defs; svg += band.svg; }
    }
    const looks = variantLooks(runVariants);
    for (const o of overlay) {
      svg += `<path class="recorded" data-variant="${escapeXml(o.name)}" data-column="${o.metric.column}" d="${pathOf(o.values.slice(0, T + 1).map((v, i) => [x(i), y(v)]))}" fill="none" stroke="${looks[o.index].colour}" stroke-width="${u}"${dashArray(looks[o.index].dashes, u)}/>`;
    }
    for (const { s, k, width } of order) {
      const points = Array.from(s.mean.subarray(0, t + 1), (v, i) => [x(i), y(v)]);
      svg += `<path class="curve" data-variant="${escapeXml(s.name)}" data-column="${s.metric.column}" d="${pathOf(points)}" fill="none" stroke="${s.look.colour}" stroke-width="${width.toFixed(2)}"${dashArray(s.look.dashes, width)}/>`;
      if (s.look.marker) {
        const marks = markSteps(T + 1, k, series.length, t).filter((i) => Number.isFinite(points[i][1]));
        svg += `<g class="markers" data-variant="${escapeXml(s.name)}" data-column="${s.metric.column}" data-marker="${s.look.marker}">` +
          marks.map((i) => markerSvg(s.look.marker, points[i][0], points[i][1], 3.4 * u, s.look.colour, "#fff", 0.8 * u)).join("") + "</g>";
      }
    }
    for (const { s } of order) {
      const atCursor = y(s.mean[cursor]);
      if (Number.isFinite(atCursor)) svg += cursorCircle(s, x(cursor), atCursor, u);
    }
    svg += labels.svg;
    svg += `<line class="cursor" x1="${x(cursor).toFixed(1)}" y1="${top}" x2="${x(cursor).toFixed(1)}" y2="${bottom}" stroke="${INK}" stroke-width="${u}" stroke-dasharray="${3 * u},${3 * u}"/>` +
      `<text x="${Math.min(Math.max(x(cursor), left + 2.5 * font), W - right - 2.5 * font).toFixed(1)}" y="${top - 7 * u}" text-anchor="middle" fill="${INK}">step ${cursor}</text>`;
    const legendHatch = `${chartId}-hatch-legend`;
    if (banded()) defs += hatchPattern(legendHatch, MUTED, false, 0);
    const legend = layoutLegend(legendEntries(chartId, series, overlay.length > 0, legendHatch), W, legendTop(bottom, u), font);
    finishChart(chartId, W, legend.bottom + 6 * u, (defs ? `<defs>${defs}</defs>` : "") + svg + legend.svg);
  }

  /* The length chart as small multiples, the design of toyrl.plots' length_by_correctness: one
     panel per variant (only the focused one, if any), titled with its display name, on shared axes;
     in each, E[L | correct] solid and E[L | incorrect] dashed in the outcomes' colours, each labelled
     at its last drawn point with the word, the cap dotted, bands of +- 1 sd when banded. Up to four
     panels a row where they keep a readable width, two on a phone; y ticks on the first column, x
     ticks under the last panel of each column. */
  function drawPanels(chartId, W) {
    const chart = CHARTS[chartId], font = chartFont(W), u = font / 12;
    const T = run.steps, t = run.t, cursor = cursorStep();
    const shown = shownVariants(chartId), series = chartSeries(chartId), overlay = recordedCurves(chartId);
    const n = shown.length, gap = 8 * u;
    const words = chart.metrics.map((m) => m.outcome);
    const gutter = gap + Math.max(...words.map((w) => textWidth(w, font))) + 4 * u, spacing = 10 * u;
    const top = 8 * u, probe = yScale(chart, series, overlay, t, 0, 200), left = yAxisWidth(probe.ticks, font);
    const fits = Math.floor((W - left) / (gutter + spacing + 110 * u));
    const most = n === 1 ? 1 : Math.min(n, 4, Math.max(2, fits)), rows = Math.ceil(n / most);
    const columns = Math.ceil(n / rows); // rows as full as each other: 2 x 2, not 3 + 1
    const panelW = (W - left) / columns;
    const titles = shown.map((v) => wrapWords(variantLabel(v.name), panelW - spacing - 4 * u, font, 700));
    const titleHeight = Math.max(...titles.map((lines) => lines.length)) * LINE * font + 4 * u;
    const plotH = n === 1 ? Math.round(Math.min(380, Math.max(170, W * 0.4)))
      : Math.round(Math.min(rows > 1 ? 190 : 280, Math.max(120, 0.6 * (panelW - gutter - spacing))));
    const tickRow = 20 * u, scale = yScale(chart, series, overlay, t, 0, plotH);
    const rowHeight = (r) => titleHeight + plotH + (r < rows - 1 ? tickRow + 6 * u : 0);
    const rowTop = (r) => top + Array.from({ length: r }, (_, k) => rowHeight(k)).reduce((a, b) => a + b, 0);
    let svg = "", defs = "";
    const columnsGeometry = [];
    const legendHatch = `${chartId}-hatch-legend`;
    shown.forEach((v, p) => {
      const r = Math.floor(p / columns), c = p % columns;
      const x0 = left + c * panelW + (c > 0 ? spacing : 0), x1 = left + (c + 1) * panelW - gutter;
      const plotTop = rowTop(r) + titleHeight, bottom = plotTop + plotH;
      const x = (s) => x0 + (s / T) * (x1 - x0), y = (value) => plotTop + scale.y(value * chart.scale);
      const yIn = (value) => Math.min(bottom, Math.max(plotTop, Number.isFinite(y(value)) ? y(value) : bottom));
      if (r === 0) columnsGeometry.push({ left: x0, width: x1 - x0 });
      let panel = titles[p].map((line, i) => `<text class="panel-title" x="${x0.toFixed(1)}" y="${(rowTop(r) + i * LINE * font + 0.95 * font).toFixed(1)}" fill="${INK}" font-weight="700">${escapeXml(line)}</text>`).join("");
      for (const tick of scale.ticks) {
        const ty = (plotTop + scale.y(tick.value)).toFixed(1);
        panel += `<line x1="${x0.toFixed(1)}" y1="${ty}" x2="${x1.toFixed(1)}" y2="${ty}" stroke="${GRID}"/>`;
        if (c === 0) panel += `<text class="tick-y" data-value="${tick.value}" x="${left - 6 * u}" y="${(+ty + 4 * u).toFixed(1)}" text-anchor="end" fill="${INK}">${tick.text}</text>`;
      }
      const xStep = tickStep(T, x1 - x0 > 600 ? 8 : x1 - x0 > 300 ? 5 : x1 - x0 > 150 ? 3 : 2);
      const labelled = p + columns >= n; // nothing under it
      for (const tick of linearTicks(0, T, xStep)) {
        panel += `<line x1="${x(tick.value).toFixed(1)}" y1="${bottom}" x2="${x(tick.value).toFixed(1)}" y2="${bottom + 4 * u}" stroke="${AXIS}"/>`;
        if (labelled) panel += `<text class="tick-x" x="${x(tick.value).toFixed(1)}" y="${bottom + 17 * u}" text-anchor="middle" fill="${INK}">${tick.text}</text>`;
      }
      panel += `<rect class="plot-area" x="${x0.toFixed(1)}" y="${plotTop}" width="${(x1 - x0).toFixed(1)}" height="${plotH}" fill="none"/>` +
        `<rect class="panel-box" x="${x0.toFixed(1)}" y="${plotTop}" width="${(x1 - x0 + gutter).toFixed(1)}" height="${plotH}" fill="none"/>` +
        `<line x1="${x0.toFixed(1)}" y1="${bottom}" x2="${x1.toFixed(1)}" y2="${bottom}" stroke="${AXIS}"/>` +
        `<line x1="${x0.toFixed(1)}" y1="${plotTop}" x2="${x0.toFixed(1)}" y2="${bottom}" stroke="${AXIS}"/>`;
      panel += `<line class="cap" x1="${x0.toFixed(1)}" y1="${y(runSpecUsed.cap).toFixed(1)}" x2="${x1.toFixed(1)}" y2="${y(runSpecUsed.cap).toFixed(1)}" stroke="${MUTED}" stroke-width="${u}" stroke-dasharray="${u},${3 * u}"/>`;
      const mine = series.filter((s) => s.index === v.index);
      if (banded()) mine.forEach((s, k) => { const band = bandSvg(`${chartId}-hatch-${p}-${k}`, s, k, x, yIn, t); defs += band.defs; panel += band.svg; });
      for (const o of overlay.filter((o) => o.index === v.index)) {
        const width = u;
        // dashes as long as the curves' (2u wide), on a line half as wide
        panel += `<path class="recorded" data-variant="${escapeXml(o.name)}" data-column="${o.metric.column}" d="${pathOf(o.values.slice(0, T + 1).map((value, i) => [x(i), y(value)]))}" fill="none" stroke="${OUTCOMES[o.metric.outcome].colour}" stroke-width="${width}"${dashArray(OUTCOME_DASHES[o.metric.outcome], 2 * width)}/>`;
      }
      const items = [];
      for (const s of mine) {
        const width = 2 * u, points = Array.from(s.mean.subarray(0, t + 1), (value, i) => [x(i), y(value)]);
        panel += `<path class="curve" data-variant="${escapeXml(s.name)}" data-column="${s.metric.column}" d="${pathOf(points)}" fill="none" stroke="${s.look.colour}" stroke-width="${width}"${dashArray(s.look.dashes, width)}/>`;
        const i = lastFinite(s.mean, t);
        items.push({ x: x(Math.max(i, 0)), y: i < 0 ? NaN : y(s.mean[i]), text: s.metric.outcome, order: 0, colour: s.look.colour, variant: s.name, column: s.metric.column });
      }
      for (const s of mine) {
        const atCursor = y(s.mean[cursor]);
        if (Number.isFinite(atCursor)) panel += cursorCircle(s, x(cursor), atCursor, u);
      }
      panel += endLabels(items, { low: plotTop, high: bottom, font, gap, wrap: Infinity, merge: false }).svg;
      panel += `<line class="cursor" x1="${x(cursor).toFixed(1)}" y1="${plotTop}" x2="${x(cursor).toFixed(1)}" y2="${bottom}" stroke="${INK}" stroke-width="${u}" stroke-dasharray="${3 * u},${3 * u}"/>`;
      svg += `<g class="panel" data-variant="${escapeXml(v.name)}">${panel}</g>`;
    });
    geometry[chartId] = { columns: columnsGeometry, T };
    const gridTop = top + titleHeight, gridBottom = rowTop(rows - 1) + titleHeight + plotH;
    svg += `<text x="${((left + W) / 2).toFixed(1)}" y="${gridBottom + 34 * u}" text-anchor="middle" fill="${INK}">training step (cursor: step ${cursor})</text>` +
      `<text x="${font}" y="${(gridTop + gridBottom) / 2}" transform="rotate(-90 ${font} ${(gridTop + gridBottom) / 2})" text-anchor="middle" fill="${INK}">${escapeXml(chart.yLabel)}</text>`;
    if (banded()) defs += hatchPattern(legendHatch, MUTED, false, 0);
    const legend = layoutLegend(legendEntries(chartId, series, overlay.length > 0, legendHatch), W, legendTop(gridBottom, u), font);
    finishChart(chartId, W, legend.bottom + 6 * u, (defs ? `<defs>${defs}</defs>` : "") + svg + legend.svg);
  }

  /* What a chart's legend holds: only what is drawn and not named where it is drawn. The length
     chart's panels name their variants and its curves' ends their outcomes: its legend has the
     line styles only where a curve has no end to label, the band, the cap and the recorded curves.
     The other charts name each variant (its colour, line style and marker) and each metric's marker. */
  function legendEntries(chartId, series, withRecorded, hatch) {
    const chart = CHARTS[chartId], entries = [], seen = new Set();
    if (chart.panels) {
      for (const m of chart.metrics) {
        if (series.some((s) => s.metric === m && lastFinite(s.mean, run.t) < 0)) entries.push({ label: m.label, colour: OUTCOMES[m.outcome].colour, dashes: OUTCOME_DASHES[m.outcome], width: 2 });
      }
    } else {
      for (const s of series) {
        if (seen.has(s.index)) continue;
        seen.add(s.index);
        const one = chart.metrics.length === 1; // else the marker is the metric's, below
        entries.push({ label: variantLabel(s.name), colour: s.look.colour, dashes: s.look.dashes, marker: one ? s.look.marker : null });
      }
      // The metrics' markers in grey: no variant's colour (black is Okabe-Ito's too) can be read as one.
      if (chart.metrics.length > 1) for (const m of chart.metrics) entries.push({ label: m.label, colour: STYLE_GREY, marker: OUTCOMES[m.outcome].marker, line: false });
    }
    if (banded()) entries.push({ label: `band: mean \u00b1 1 sd over ${seedCount()} seeds (sample sd)`, colour: MUTED, hatch });
    if (chart.cap) entries.push({ label: `the cap (${runSpecUsed.cap.toLocaleString("en")} tokens)`, colour: MUTED, dashes: [1, 3], width: 1 });
    if (withRecorded) entries.push({ label: `thin: recorded, ${recorded.description}`, colour: STYLE_GREY, width: 1 });
    return entries;
  }

  /* The values at the cursor, under each chart: mean (and sd) over seeds; full doubles in data-value. */
  function drawReadout(chartId) {
    const table = $(chartId.replace("chart-", "readout-")), chart = CHARTS[chartId];
    if (!run) { table.innerHTML = ""; return; }
    const cursor = cursorStep(), looks = variantLooks(runVariants), key = chartId.replace("chart-", "");
    const head = chart.metrics.map((m) => `<th scope="col">${escapeXml(m.label)}</th>`).join("");
    let body = "";
    for (const v of shownVariants(chartId)) {
      const cells = chart.metrics.map((m) => {
        const { mean, sd } = stats(m.column, v.index);
        const value = mean[cursor] * chart.scale, spread = sd[cursor] * chart.scale;
        const text = chart.format(value) + (Number.isFinite(spread) ? ` \u00b1 ${(chart.spread ?? chart.format)(spread, value)}` : "");
        return `<td id="readout-${key}-${v.index}-${m.column}" data-value="${mean[cursor]}" data-sd="${sd[cursor]}">${escapeXml(text)}</td>`;
      }).join("");
      const swatch = chart.panels ? "" : `<span class="swatch" style="background:${looks[v.index].colour}"></span>`; // the length panels draw no variant's colour
      body += `<tr><th scope="row">${swatch}${escapeXml(variantLabel(v.name))}</th>${cells}</tr>`;
    }
    for (const v of shownVariants(chartId)) {
      if (!recorded || !state.overlay || !recorded.curves[v.name] || cursor > recorded.steps) continue;
      const cells = chart.metrics.map((m) => {
        if (!recorded.curves[v.name][m.column]) return "<td></td>";
        const value = recordedValues(v.name, m.column)[cursor];
        const shown = Number.isNaN(value) ? "not finite" : chart.format(value * chart.scale);
        return `<td id="readout-${key}-recorded-${escapeXml(v.name)}-${m.column}" data-value="${value}">${escapeXml(shown)}</td>`;
      }).join("");
      body += `<tr><th scope="row">recorded ${escapeXml(variantLabel(v.name))}</th>${cells}</tr>`;
    }
    const seeds = seedCount(), spread = chart.spread ? ", as a share of the mean" : "";
    const plusMinus = seeds > 1 ? `; mean \u00b1 1 sd over ${seeds} seeds (sample sd${spread})` : `; one seed: no sd`;
    table.innerHTML = `<caption class="note">at step ${cursor} (trained: ${run.t} of ${run.steps})${plusMinus}</caption>` +
      `<thead><tr><th scope="col">variant</th>${head}</tr></thead><tbody>${body}</tbody>`;
  }

  // =================================================================================================
  // The lessons, in words computed from the run
  // =================================================================================================
  const meanAt = (column, index, step) => stats(column, index).mean[step];

  const NUMBER_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];

  /* The length lesson: one sentence under the length chart, worded from the run at the cursor's
     step. Before training, what to predict; after, how long the wrong answers of the two variants
     with the longest and the shortest ones have become, against their right ones. */
  function drawLesson() {
    const lesson = $("lesson");
    if (!run) { lesson.textContent = "Nothing is trained until the settings are fixed: see the message under play."; return; }
    const s = cursorStep(), n = runVariants.length, names = runVariants.map(variantLabel);
    const wrong = (i, step) => meanAt("length_incorrect", i, step), right = (i, step) => meanAt("length_correct", i, step);
    const against = (i, unit) => (Number.isFinite(right(i, s)) ? `against ${tokens(right(i, s))}${unit}` : "with no right answers");
    if (s === 0) {
      const who = n === 1 ? names[0] : `${names[0]} and under ${names[n - 1]}`;
      lesson.textContent = `${run.t === 0 ? "Predict, then press play" : "At step 0, before training"}: over ${run.steps} steps, ` +
        `what happens to wrong answers, now ${tokens(wrong(0, 0))} tokens against ${tokens(right(0, 0))} for right ones, under ${who}?`;
      return;
    }
    const after = `After ${s} step${s === 1 ? "" : "s"}${state.mode === "mean_field" ? " of the exact expected update" : ""}`;
    const ranked = runVariants.map((_, i) => i).filter((i) => Number.isFinite(wrong(i, s))).sort((i, j) => wrong(j, s) - wrong(i, s));
    if (!ranked.length) { lesson.textContent = `${after}, the wrong answers' length is not finite: the run diverged (see the readout).`; return; }
    const change = (i) => {
      const ratio = wrong(i, s) / wrong(i, 0);
      return ratio > 1.05 ? "have grown to" : ratio < 1 / 1.05 ? "have shrunk to" : "stay at";
    };
    const longest = ranked[0], shortest = ranked.at(-1), others = n - 2;
    const from = `from ${tokens(wrong(0, 0))} and ${tokens(right(0, 0))} at step 0`;
    let text = `${after}, wrong answers under ${names[longest]} ${change(longest)} ${tokens(wrong(longest, s))} tokens ${against(longest, " for right ones")}`;
    if (ranked.length === 1) {
      text += ` (${from})`;
    } else {
      const rest = others < 1 ? "" : `; the other ${others === 1 ? "variant ends" : `${NUMBER_WORDS[others] ?? others} end`} between them`;
      text += `; under ${names[shortest]} they ${change(shortest)} ${tokens(wrong(shortest, s))} ${against(shortest, "")} ` +
        `(${n === 2 ? "both" : "all"} ${from}${rest})`;
    }
    lesson.textContent = `${text}.`;
  }

  // The difficulty lesson, once the run is over: the update mass of rare successes, and the run's
  // pairs that differ only by the std term.
  function drawDifficultyAnswer() {
    const difficulty = $("answer-difficulty");
    if (!run || !run.done) {
      difficulty.textContent = run ? `The answer appears when the run reaches step ${run.steps} (now ${run.t}): press play.` : "Start a run first.";
      return;
    }
    const T = run.steps;
    const G = runSpecUsed.group_size, rare = groupStats(1, G);
    const grpoRare = (100 * groupMass(rare.scaled, 1, G)) / G, drRare = (100 * groupMass(rare.centred, 1, G)) / (G / 2);
    let text = `<p>With G = ${G}, a group with 1 right answer gets ${grpoRare.toFixed(0)}% of a half-right group's update mass under GRPO ` +
      `and ${drRare.toFixed(0)}% under Dr. GRPO: half-right groups get the most under both, and GRPO's std division flattens the profile toward the rare cases.</p>`;
    const pairs = [["grpo", "length_only"], ["std_only", "dr_grpo"]].filter(([a, b]) => runVariants.includes(a) && runVariants.includes(b));
    if (pairs.length) {
      const words = pairs.map(([a, b]) => {
        const i = runVariants.indexOf(a), j = runVariants.indexOf(b);
        return `${variantLabel(a)} ${percent(meanAt("accuracy", i, T))} vs ${variantLabel(b)} ${percent(meanAt("accuracy", j, T))} accuracy, ` +
          `E[L | incorrect] ${tokens(meanAt("length_incorrect", i, T))} vs ${tokens(meanAt("length_incorrect", j, T))}`;
      });
      text += `<p>In this run, with the std division against without it at step ${T}: ${escapeXml(words.join("; "))}.</p>`;
    } else {
      text += `<p>To see what the std term does to the run, choose ${escapeXml(variantLabel("grpo"))} and ${escapeXml(variantLabel("length_only"))} ` +
        `(or ${escapeXml(variantLabel("std_only"))} and ${escapeXml(variantLabel("dr_grpo"))}): they differ only by it.</p>`;
    }
    difficulty.innerHTML = text;
  }

  // The chain's numbers for one variant: the focused one, else the first.
  function drawChain() {
    const fill = (name, text) => { document.querySelector(`[data-chain="${name}"]`).textContent = text; };
    if (!run) { for (const n of ["weight", "phi", "wrong", "right", "accuracy"]) fill(n, ""); return; }
    const index = state.focus === "all" ? 0 : runVariants.indexOf(state.focus);
    const name = runVariants[index], s = cursorStep();
    const aggregation = presetByName.get(name)?.spec.aggregation ?? "";
    const from = (column, format) => `${format(meanAt(column, index, 0))} \u2192 ${format(meanAt(column, index, s))}`;
    // what the normaliser divides a token's weight by, in its own words (its `divides`, in Python)
    fill("weight", `${variantLabel(name)}: each token's weight A ${DATA.registry.normaliser[aggregation]?.divides ?? aggregation}`);
    fill("phi", `${variantLabel(name)}, steps 0 \u2192 ${s}: \u03c3(\u03c6w) ${from("stop_prob_wrong", oneIn)}`);
    fill("wrong", `E[L | incorrect] ${from("length_incorrect", tokens)} tokens`);
    fill("right", `E[L | correct] ${from("length_correct", tokens)}; right approach ${from("length_right_approach", tokens)} (cap ${runSpecUsed.cap.toLocaleString("en")})`);
    fill("accuracy", `accuracy ${from("accuracy", percent)}`);
  }

  function draw() {
    // Every width is read before anything is written: a read after a write would lay the page out again.
    const widths = Object.keys(CHARTS).map((chartId) => Math.max(240, Math.floor($(chartId).clientWidth)));
    Object.keys(CHARTS).forEach((chartId, i) => { drawChart(chartId, widths[i]); drawReadout(chartId); });
    for (const note of document.querySelectorAll(".band-note")) note.textContent = bandNote();
    $("step-counter").textContent = run ? `step ${run.t} / ${run.steps}` : "no run";
    $("play").disabled = !run || run.done;
    $("step-once").disabled = !run || run.done;
    drawLesson();
    drawDifficultyAnswer();
    drawChain();
  }

  // =================================================================================================
  // The step cursor: pointer, touch and keys
  // =================================================================================================
  function setCursor(step) {
    if (!run) return;
    const s = Math.round(Math.min(Math.max(step, 0), run.t));
    state.cursor = s >= run.t ? null : s; // at the last step: follow the training
    draw();
    scheduleHash();
  }

  function pointerStep(chartId, event) {
    const g = geometry[chartId];
    if (!g) return null;
    const px = event.clientX - $(chartId).getBoundingClientRect().left;
    // the column of panels under the pointer, else the nearest
    const distance = (c) => Math.max(c.left - px, px - c.left - c.width, 0);
    const column = g.columns.reduce((best, c) => (distance(c) < distance(best) ? c : best));
    return ((px - column.left) / column.width) * g.T;
  }

  function wireChart(chartId) {
    const box = $(chartId);
    box.setAttribute("role", "slider");
    box.setAttribute("aria-label", `step cursor: ${CHARTS[chartId].title} (arrow keys move it)`);
    box.setAttribute("aria-valuemin", "0");
    const follow = (event) => { const s = pointerStep(chartId, event); if (s !== null) setCursor(s); };
    box.addEventListener("pointerdown", follow);
    box.addEventListener("pointermove", (event) => { if (event.pointerType === "mouse" || event.buttons) follow(event); });
    box.addEventListener("keydown", (event) => {
      if (!run) return;
      const big = Math.max(10, Math.round(run.steps / 10)), now = cursorStep();
      const moves = { ArrowLeft: -1, ArrowDown: -1, ArrowRight: 1, ArrowUp: 1, PageDown: -big, PageUp: big };
      if (event.key in moves) setCursor(now + moves[event.key] * (event.shiftKey && Math.abs(moves[event.key]) === 1 ? 10 : 1));
      else if (event.key === "Home") setCursor(0);
      else if (event.key === "End") setCursor(run.t);
      else return;
      event.preventDefault();
    });
  }

  // =================================================================================================
  // The view in the URL's hash
  // =================================================================================================
  function hashText() {
    const params = new URLSearchParams();
    params.set("variants", state.variants.join(","));
    for (const s of SETTINGS) params.set(s.key, $(`set-${s.key}`).value);
    params.set("mode", state.mode);
    if (run) params.set("t", String(run.t));
    if (state.cursor !== null) params.set("cursor", String(state.cursor));
    if (state.focus !== "all") params.set("focus", state.focus);
    if (state.overlay) params.set("overlay", "1");
    return params.toString();
  }

  // Written after a pause in changes, so that play and a moving cursor do not flood the history.
  function scheduleHash() {
    clearTimeout(hashTimer);
    hashTimer = setTimeout(() => { if (!playing) history.replaceState(null, "", `#${hashText()}`); }, 150);
  }

  const LINK_FIELDS = ["variants", ...SETTINGS.map((s) => s.key), "mode", "t", "cursor", "focus", "overlay"];

  /* Apply a hash to the controls; returns the step to train to, the cursor, and a line for each
     field the page refuses (unknown, or outside its range: nothing then trains, nothing grows). */
  function readHash(text) {
    const params = new URLSearchParams(text.replace(/^#/, ""));
    const errors = [];
    for (const key of new Set(params.keys())) {
      if (!LINK_FIELDS.includes(key)) errors.push(`unknown link field ${JSON.stringify(key)}; valid: ${LINK_FIELDS.join(", ")}`);
      else if (params.getAll(key).length > 1) errors.push(`${key} must be given once in a link (got ${params.getAll(key).length} values)`);
    }
    if (params.has("variants")) setVariants(params.get("variants").split(",").filter(Boolean));
    for (const name of state.variants) {
      try {
        toyrl.resolve(name); // throws an Error naming the unknown variant or spec key and the valid ones
      } catch (error) {
        errors.push(error.message);
      }
    }
    for (const s of SETTINGS) {
      if (!params.has(s.key)) continue;
      const input = $(`set-${s.key}`), raw = params.get(s.key);
      input.value = raw;
      if (input.value === raw) delete input.dataset.typed;
      else input.dataset.typed = raw; // a number box empties text that is no number: keep what was written
    }
    if (params.has("mode")) {
      const mode = params.get("mode");
      if (mode === "sampled" || mode === "mean_field") state.mode = mode;
      else errors.push(`mode must be sampled or mean_field (got ${written(mode)})`);
    }
    const focus = params.get("focus") ?? "all";
    if (focus === "all" || state.variants.includes(focus)) state.focus = focus;
    else errors.push(`focus must be all or a chosen variant (${state.variants.join(", ")}) (got ${written(focus)})`);
    const overlay = params.get("overlay") ?? "0";
    if (overlay !== "0" && overlay !== "1") errors.push(`overlay must be 0 or 1 (got ${written(overlay)})`);
    state.overlay = overlay === "1" && Boolean(recorded);
    // t and the cursor: steps of the run the link asks for, so within its steps
    const steps = settingValues().steps, stepsOk = Number.isInteger(steps) && steps >= 1;
    const step = (key, high, within) => {
      if (!params.has(key)) return null;
      const raw = params.get(key), value = raw.trim() === "" ? NaN : Number(raw);
      if (Number.isInteger(value) && value >= 0 && value <= high) return value;
      errors.push(`${key} must be an integer in 0..${high.toLocaleString("en")}${within} (got ${written(raw)})`);
      return null;
    };
    const t = stepsOk ? step("t", steps, ", the steps of the run") : null;
    const cursor = stepsOk ? step("cursor", t ?? 0, ", the step t trained to") : null;
    return { t: t ?? 0, cursor, errors };
  }

  function restore(text, then) {
    const wanted = readHash(text);
    syncControls();
    startRun(wanted.errors);
    trainTo(wanted.t, () => {
      state.cursor = run ? wanted.cursor : null;
      draw();
      then();
    });
  }

  // =================================================================================================
  // Export: SVG text and PNG data URLs of each chart
  // =================================================================================================
  const EXPORTABLE = ["chart-length", "chart-accuracy", "chart-stop", "difficulty-plot"];

  function chartSvg(id) {
    if (!EXPORTABLE.includes(id)) throw new Error(`exportChart: no chart ${JSON.stringify(id)}; charts: ${EXPORTABLE.join(", ")}`);
    return $(id).querySelector("svg").outerHTML;
  }

  function chartPng(id) {
    const svg = chartSvg(id), element = $(id).querySelector("svg");
    const width = Number(element.getAttribute("width")), height = Number(element.getAttribute("height"));
    return new Promise((resolve, reject) => {
      const image = new Image();
      image.onload = () => {
        const canvas = document.createElement("canvas");
        canvas.width = width;
        canvas.height = height;
        canvas.getContext("2d").drawImage(image, 0, 0, width, height);
        resolve(canvas.toDataURL("image/png"));
      };
      image.onerror = () => reject(new Error(`exportChart: the SVG of ${id} did not render`));
      image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
    });
  }

  function exportChart(id, format) {
    if (format === "svg") return chartSvg(id);
    if (format === "png") return chartPng(id);
    throw new Error(`exportChart: format must be 'svg' or 'png' (got ${JSON.stringify(format)})`);
  }

  async function download(id, format) {
    const href = format === "svg" ? URL.createObjectURL(new Blob([chartSvg(id)], { type: "image/svg+xml" })) : await chartPng(id);
    const link = document.createElement("a");
    link.href = href;
    link.download = `toyrl-${id}.${format}`;
    link.click();
    if (format === "svg") setTimeout(() => URL.revokeObjectURL(href), 1000);
  }

  // =================================================================================================
  // Wiring
  // =================================================================================================
  function wire() {
    for (const id of ["len-correct", "len-wrong", "len-short", "group", "correct", "lnorm"]) $(id).addEventListener("input", updateWeights);
    for (const id of ["d-group", "d-correct"]) $(id).addEventListener("input", updateDifficulty);
    for (const button of document.querySelectorAll(".switch")) {
      button.addEventListener("click", () => {
        const name = button.dataset.variant;
        setVariants(state.variants.includes(name) ? state.variants.filter((n) => n !== name) : [...state.variants, name]);
        changed();
      });
    }
    $("preset-add").addEventListener("click", () => {
      const name = $("preset-picker").value;
      if (!name) return;
      setVariants([...state.variants, name]);
      changed();
    });
    $("controls").addEventListener("submit", (event) => event.preventDefault());
    for (const input of document.querySelectorAll("#settings input")) {
      input.addEventListener("input", () => { delete input.dataset.typed; });
      input.addEventListener("change", changed);
    }
    for (const radio of document.querySelectorAll('input[name="mode"]')) {
      radio.addEventListener("change", () => { state.mode = radio.value; changed(); });
    }
    $("length-focus").addEventListener("change", () => { state.focus = $("length-focus").value; draw(); scheduleHash(); });
    if ($("overlay")) $("overlay").addEventListener("change", () => { state.overlay = $("overlay").checked; draw(); scheduleHash(); });
    $("play").addEventListener("click", () => (playing ? pause() : play()));
    $("step-once").addEventListener("click", () => { if (run && !run.done) { pause(); run.advance(1); draw(); scheduleHash(); } });
    $("reset").addEventListener("click", () => { startRun(); draw(); scheduleHash(); });
    for (const button of document.querySelectorAll("[data-export]")) {
      button.setAttribute("aria-label", `download the ${button.dataset.export} chart as ${button.dataset.format.toUpperCase()}`);
      button.addEventListener("click", () => download(button.dataset.export, button.dataset.format));
    }
    for (const chartId of Object.keys(CHARTS)) wireChart(chartId);
    // Redraw at the new width only: drawing changes a chart's height, which must not loop.
    const widths = new Map();
    const observer = new ResizeObserver((entries) => {
      const resized = entries.filter((e) => widths.get(e.target) !== Math.floor(e.contentRect.width));
      for (const e of resized) widths.set(e.target, Math.floor(e.contentRect.width));
      if (!resized.length) return;
      requestAnimationFrame(() => {
        if (resized.some((e) => e.target.id === "difficulty-plot")) updateDifficulty();
        if (resized.some((e) => e.target.id !== "difficulty-plot")) draw();
      });
    });
    for (const id of EXPORTABLE) observer.observe($(id));
    window.addEventListener("hashchange", () => restore(location.hash, () => {}));
  }

  buildSettings();
  buildPresetPicker();
  buildPresetTable();
  buildOverlayControl();
  buildDocs();
  $("version-note").textContent = `Built by toyrl ${DATA.version}.`;
  $("play").setAttribute("aria-label", "play: train live");
  wire();
  toyrl.exportChart = exportChart;
  toyrl.ui = { state, get run() { return run; }, get spec() { return runSpecUsed; } };
  updateWeights();
  updateDifficulty();
  restore(location.hash, () => { document.body.dataset.ready = "1"; });
})();
