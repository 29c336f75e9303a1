// attnlens explorer: decodes the data embedded in this page and draws it. No network, no server.
// Every number shown was computed by attnlens (src/attnlens/render/explorer.py); this script only decodes,
// colours and navigates. Layout of the data: see encode_partners / payload in render/explorer.py.
"use strict";
(function () {
  const meta = JSON.parse(document.getElementById("attnlens-meta").textContent);
  const $ = (id) => document.getElementById(id);
  $("controls").addEventListener("submit", (ev) => ev.preventDefault());  // no inline handlers: the page's CSP
  const n = meta.n_tokens, K = meta.top_k, H = meta.n_heads, L = meta.n_layers;

  function float16(bits) {
    const s = bits & 0x8000 ? -1 : 1, e = (bits >> 10) & 0x1f, f = bits & 0x3ff;
    if (e === 0) return s * f * Math.pow(2, -24);
    if (e === 31) return f ? NaN : s * Infinity;
    return s * (1 + f / 1024) * Math.pow(2, e - 15);
  }

  async function decode() {
    const text = document.getElementById("attnlens-data").textContent.trim();
    const raw = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate"));
    const buf = await new Response(stream).arrayBuffer();
    const out = {};
    for (const a of meta.arrays) {
      const count = a.shape.reduce((x, y) => x * y, 1);
      if (a.dtype === "f4") out[a.name] = new Float32Array(buf, a.offset, count);
      else if (a.dtype === "i2") out[a.name] = new Int16Array(buf, a.offset, count);
      else if (a.dtype === "u1") out[a.name] = new Uint8Array(buf, a.offset, count);
      else if (a.dtype === "i4") out[a.name] = new Int32Array(buf, a.offset, count);
      else if (a.dtype === "f2") {
        const u = new Uint16Array(buf, a.offset, count), f = new Float32Array(count);
        for (let i = 0; i < count; i++) f[i] = float16(u[i]);
        out[a.name] = f;
      } else throw new Error("unknown dtype " + a.dtype);
    }
    return out;
  }

  const state = { overlay: "attribution", kind: "configuration", layers: "all", layer: 1, head: 1, scaled: false, selected: -1, target: 0 };
  let data, spans, colours = [], l2 = null;
  // the explained outputs (a multi-label document's labels): the headline's arrays are "attribution" and "evidence",
  // the k-th other one's "attribution_t<k>" and "evidence_t<k>"
  const targets = meta.targets;
  // the leaderboard's methods explain the headline output alone (docs/tasks.md)
  function headlineOnly() { return targets.length > 1 ? " (the headline output, whichever is chosen)" : ""; }
  function attribution() { return state.target ? data["attribution_t" + state.target] : data.attribution; }
  function evidence() { return state.target ? data["evidence_t" + state.target] : data.evidence; }
  function normalise() {
    const a = attribution();
    let s = 0;
    for (let i = 0; i < n; i++) s += a[i] * a[i];
    const norm = Math.sqrt(s) || 1;
    l2 = Array.from(a, (x) => x / norm);
  }

  function viewIndex() {
    if (state.kind === "head") return (state.layer - 1) * H + (state.head - 1);
    return meta.configurations.find((c) => c.layers === state.layers && c.scaled === state.scaled).view;
  }
  function viewFactor() {
    return state.kind === "head" && state.scaled ? data.importance[(state.layer - 1) * H + (state.head - 1)] : 1;
  }
  function viewLabel() {
    const scale = state.scaled ? "scaled by head importance" : "unscaled";
    if (state.kind === "head") return `layer ${state.layer}, head ${state.head}, ${scale}`;
    return `layers: ${state.layers} (all heads), ${scale}`;
  }
  function received(i) { return data.received[viewIndex() * n + i] * viewFactor(); }

  // the k partners of token i in direction dir ("attended" | "attending"), sorted by value (desc), position
  function partners(dir, i) {
    const v = viewIndex(), planes = data[dir + "_gaps"], levels = data[dir + "_level"];
    const V = meta.configurations.length + L * H, plane = V * K * n, scale = data[dir + "_scale"][v] * viewFactor();
    const out = [];
    let pos = i;
    for (let r = 0; r < K; r++) {
      const at = (v * K + r) * n + i;
      const gap = (((planes[plane + at] << 8) | planes[at]) << 16) >> 16;
      if (gap === meta.no_partner) break;
      pos += gap;
      const q = levels[at] / meta.levels;
      out.push({ pos: pos, value: scale * q * q });
    }
    return out.sort((a, b) => b.value - a.value || a.pos - b.pos);
  }

  function nonSpecialMax(values, absolute) {
    let m = 0;
    for (let i = 0; i < n; i++) if (!data.special[i]) m = Math.max(m, absolute ? Math.abs(values[i]) : values[i]);
    return m;
  }
  // colours: a signed score on Captum's lightness ramp with purple–orange hues (render/overlays.py, signed_colour:
  // red–green is lost to the commonest colour-vision deficiencies), attention white → blue
  const SIGNED_SCALE = "purple negative, orange positive (readable with red–green colour blindness)";
  function attributionColour(t) {
    t = Math.max(-1, Math.min(1, t));
    return t > 0 ? `hsl(30, 75%, ${100 - Math.round(50 * t)}%)` : `hsl(270, 75%, ${100 - Math.round(40 * -t)}%)`;
  }
  function attentionColour(t) { return `hsl(220, 90%, ${100 - Math.round(55 * Math.max(0, Math.min(1, t)))}%)`; }

  function explanation() {
    return state.overlay.startsWith("explanation:") ? (meta.explanations || []).find((e) => "explanation:" + e.method === state.overlay) : null;
  }
  function overlayValues() {
    if (state.overlay === "attribution") return Array.from(attribution());
    const ex = explanation();
    if (ex) return Array.from(data["explanation_" + ex.method]);
    if (state.overlay === "evidence") return Array.from(evidence() || new Uint8Array(n));
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = received(i);
    return out;
  }

  function paint() {
    const values = overlayValues();
    const legend = $("legend-bar").getContext("2d"), w = $("legend-bar").width, h = $("legend-bar").height;
    let m, colour, lo, hi, text;
    if (state.overlay === "attribution") {
      m = nonSpecialMax(values, true) || 1;
      colour = (x) => attributionColour(x / m);
      lo = (-m).toPrecision(3); hi = m.toPrecision(3);
      const t = targets[state.target];
      text = `IG attribution toward “${t.name}” (${t.ig_steps} steps, δ = ${t.ig_delta.toExponential(2)}); ` +
        `symmetric scale ±max |a| over non-special tokens; ${SIGNED_SCALE}.`;
    } else if (explanation() && explanation().signed) {
      m = nonSpecialMax(values, true) || 1;
      colour = (x) => attributionColour(x / m);
      lo = (-m).toPrecision(3); hi = m.toPrecision(3);
      text = `${explanation().label} toward “${meta.info.explained}”${headlineOnly()}; symmetric scale ±max over non-special tokens; ` +
        `${SIGNED_SCALE}.`;
    } else if (explanation()) {
      m = nonSpecialMax(values, false) || 1;
      colour = (x) => attentionColour(x / m);
      lo = "0"; hi = m.toPrecision(3);
      text = `${explanation().label}; scale 0 → max over non-special tokens, special tokens above it are clipped.`;
    } else if (state.overlay === "evidence") {
      m = 1; colour = (x) => (x ? "hsl(45, 100%, 70%)" : "transparent");
      lo = "other"; hi = "evidence";
      text = `Tokens overlapping a planted evidence phrase of the synthetic corpus for “${targets[state.target].name}”.`;
    } else {
      m = nonSpecialMax(values, false) || 1;
      colour = (x) => attentionColour(x / m);
      lo = "0"; hi = m.toPrecision(3);
      text = `Received attention (Σ over attending queries), ${viewLabel()}; scale 0 → max over non-special tokens, ` +
        `special tokens above it are clipped (dotted underline).`;
    }
    for (let i = 0; i < n; i++) {
      colours[i] = colour(values[i]);
      spans[i].style.backgroundColor = colours[i];
      spans[i].classList.toggle("clipped", (state.overlay === "attention" || (explanation() && !explanation().signed)) && values[i] > m);
      spans[i].dataset.value = String(values[i]);
    }
    for (let x = 0; x < w; x++) {
      const t = x / (w - 1);
      const signed = state.overlay === "attribution" || (explanation() && explanation().signed);
      legend.fillStyle = signed ? attributionColour(2 * t - 1)
        : state.overlay === "evidence" ? (t < 0.5 ? "#fff" : "hsl(45, 100%, 70%)") : attentionColour(t);
      legend.fillRect(x, 0, 1, h);
    }
    $("legend-min").textContent = lo; $("legend-max").textContent = hi; $("legend-text").textContent = text;
    document.body.dataset.overlay = state.overlay;
    drawMinimap();
    if (state.selected >= 0) select(state.selected, false);
  }

  // --- details panel and highlighting ---
  function fmt(x) { return Number.isFinite(x) ? x.toPrecision(4) : "–"; }
  function tokenLabel(j) { return `${meta.tokens[j]} @${j}`; }
  function select(i, scroll) {
    for (const cls of ["selected", "attended", "attending"]) for (const s of document.querySelectorAll(".tok." + cls)) s.classList.remove(cls);
    state.selected = i;
    if (i < 0) return;
    spans[i].classList.add("selected");
    $("d-hint").hidden = true;
    $("d-position").textContent = String(i);
    $("d-token").textContent = meta.tokens[i];
    $("d-attribution").textContent = fmt(attribution()[i]);
    $("d-attribution-l2").textContent = fmt(l2[i]);
    $("d-received").textContent = fmt(received(i));
    $("d-evidence").textContent = evidence() ? (evidence()[i] ? "yes" : "no") : "not known for this corpus";
    for (const dir of ["attended", "attending"]) {
      const list = $("d-" + dir);
      list.replaceChildren();
      for (const p of partners(dir, i)) {
        spans[p.pos].classList.add(dir);
        const li = document.createElement("li");
        li.textContent = `${tokenLabel(p.pos)} — ${fmt(p.value)}`;
        li.dataset.pos = String(p.pos);
        li.addEventListener("click", () => { select(p.pos, true); });
        list.appendChild(li);
      }
      if (!list.children.length) { const li = document.createElement("li"); li.textContent = "none (no attention)"; list.appendChild(li); }
    }
    $("d-view").textContent = `view: ${viewLabel()}; partner values to within 8-bit quantisation.`;
    if (scroll) spans[i].scrollIntoView({ block: "center" });
    drawMinimap();
  }

  // --- minimap: the document as a grid of coloured cells, with the visible part framed ---
  const COLS = 24, MAX_CELL = 6;  // cells per row; a short document's rows stay thin
  function drawMinimap() {
    const c = $("minimap"), ctx = c.getContext("2d");
    c.height = c.clientHeight || 600;
    const rows = Math.ceil(n / COLS), cw = c.width / COLS, ch = Math.min(MAX_CELL, c.height / rows);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    for (let i = 0; i < n; i++) {
      ctx.fillStyle = colours[i] === "transparent" ? "#fff" : colours[i];
      ctx.fillRect((i % COLS) * cw, Math.floor(i / COLS) * ch, Math.ceil(cw), Math.max(1, Math.ceil(ch)));
    }
    const mark = (i, style) => { ctx.fillStyle = style; ctx.fillRect((i % COLS) * cw, Math.floor(i / COLS) * ch, Math.ceil(cw), Math.max(2, Math.ceil(ch))); };
    for (const s of document.querySelectorAll(".tok.attended")) mark(+s.dataset.i, getComputedStyle(document.body).getPropertyValue("--attended"));
    for (const s of document.querySelectorAll(".tok.attending")) mark(+s.dataset.i, getComputedStyle(document.body).getPropertyValue("--attending"));
    if (state.selected >= 0) mark(state.selected, "#000");
    const [first, last] = visibleRange();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
    const y0 = Math.floor(first / COLS) * ch, y1 = (Math.floor(last / COLS) + 1) * ch;
    ctx.strokeRect(1, y0 + 1, c.width - 2, Math.max(3, y1 - y0 - 2));
  }
  function tokenAtOffset(y) {  // first token whose line is at or below y (binary search over offsets)
    let lo = 0, hi = n - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (spans[mid].offsetTop + spans[mid].offsetHeight < y) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function visibleRange() {
    const t = $("text");
    return [tokenAtOffset(t.scrollTop), tokenAtOffset(t.scrollTop + t.clientHeight)];
  }
  function minimapClick(ev) {
    const c = $("minimap"), rect = c.getBoundingClientRect();
    const rows = Math.ceil(n / COLS), ch = Math.min(MAX_CELL, rect.height / rows);
    const row = Math.floor((ev.clientY - rect.top) / ch);
    const col = Math.floor(((ev.clientX - rect.left) / rect.width) * COLS);
    const i = Math.max(0, Math.min(n - 1, row * COLS + col));
    spans[i].scrollIntoView({ block: "center" });
  }

  function buildText() {
    const frag = document.createDocumentFragment();
    spans = new Array(n);
    for (let i = 0; i < n; i++) {
      if (i > 0 && meta.starts_word[i]) frag.appendChild(document.createTextNode(" "));
      const s = document.createElement("span");
      s.className = data.special[i] ? "tok special" : "tok";
      s.textContent = meta.tokens[i];
      s.dataset.i = String(i);
      s.title = `#${i}`;
      spans[i] = s;
      frag.appendChild(s);
    }
    const t = $("text");
    t.replaceChildren(frag);
    t.addEventListener("click", (ev) => { const s = ev.target.closest(".tok"); if (s) select(+s.dataset.i, false); });
    t.addEventListener("scroll", () => requestAnimationFrame(drawMinimap));
    t.addEventListener("keydown", (ev) => {
      if (state.selected < 0) return;
      if (ev.key === "ArrowRight") select(Math.min(n - 1, state.selected + 1), true);
      else if (ev.key === "ArrowLeft") select(Math.max(0, state.selected - 1), true);
    });
  }

  function buildControls() {
    const layers = $("layers");
    for (const name of [...new Set(meta.configurations.map((c) => c.layers))]) layers.add(new Option(name, name, name === state.layers, name === state.layers));
    for (let l = 1; l <= L; l++) $("layer").add(new Option(String(l), String(l)));
    for (let h = 1; h <= H; h++) $("head").add(new Option(String(h), String(h)));
    if (!data.evidence) $("overlay").querySelector('option[value="evidence"]').disabled = true;
    for (const ex of meta.explanations || []) $("overlay").add(new Option(ex.label, "explanation:" + ex.method));
    targets.forEach((t, k) => $("target").add(new Option(t.name, String(k), k === 0, k === 0)));
    $("target-choice").hidden = targets.length < 2;  // one explained output: nothing to choose
    const sync = () => {
      state.overlay = $("overlay").value;
      state.kind = document.querySelector('input[name="kind"]:checked').value;
      state.layers = layers.value;
      state.layer = +$("layer").value; state.head = +$("head").value;
      state.scaled = $("scaled").checked;
      state.target = +$("target").value || 0;
      normalise();
      paint();
    };
    for (const el of document.querySelectorAll("#controls select, #controls input")) el.addEventListener("change", sync);
    $("minimap").addEventListener("click", minimapClick);
    window.addEventListener("resize", () => drawMinimap());
  }

  function describe() {
    const i = meta.info, probs = Object.entries(i.outputs).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(", ");
    $("info").textContent = `${n} tokens · ${L} layers × ${H} heads · top-${K} partners · ${i.label == null ? "" : `true label ${i.label}, `}predicted ${i.prediction} (${probs})` +
      (i.notes && i.notes.length ? ` · ${i.notes.join(" · ")}` : "");
    $("provenance").textContent = JSON.stringify(meta.provenance, null, 2);
  }

  decode().then((decoded) => {
    data = decoded;
    normalise();
    describe();
    buildText();
    buildControls();
    paint();
    window.attnlens = { meta, data, state, select, partners, received, paint };
    document.body.dataset.ready = "1";
  }).catch((err) => {
    $("text").textContent = "This page could not decode its data: " + err + " (it needs a browser with DecompressionStream).";
    document.body.dataset.ready = "error";
  });
})();
