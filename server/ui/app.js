// geolimit's status page. It reads GET /v1/status, /v1/hotkeys and
// /v1/activity every 2 s and sets rules' modes with PUT
// /v1/rules/{name}/mode. The bearer token, when the node asks for one, is
// typed in and kept in this script's memory only (never in storage or the
// URL). Every value from the node is written with textContent: keys are
// client-chosen text.
"use strict";
(function () {
  const EVERY = 2000;
  let token = "";
  let timer = null;
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  }

  async function api(method, path, body) {
    const h = {};
    if (token) h["Authorization"] = "Bearer " + token;
    if (body !== undefined) h["Content-Type"] = "application/json";
    const r = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
    let j = null;
    try { j = await r.json(); } catch (_) { /* not JSON */ }
    if (r.status === 401) {
      const e = new Error((j && j.error) || "unauthorized");
      e.unauthorized = true;
      throw e;
    }
    if (!r.ok) throw new Error(method + " " + path + ": " + r.status + " " + ((j && j.error) || ""));
    return j;
  }

  function showError(msg) {
    const e = $("error");
    e.textContent = msg || "";
    e.hidden = !msg;
  }

  const ms = (ns) => (ns / 1e6).toFixed(ns !== 0 && Math.abs(ns) < 1e7 ? 1 : 0) + " ms";

  // Fleet: regions, then PoPs, then nodes.
  function renderFleet(st) {
    const regions = new Map();
    const region = (name) => {
      if (!regions.has(name)) regions.set(name, new Map());
      return regions.get(name);
    };
    const drift = new Map((st.drift || []).map((d) => [d.region + "/" + d.pop, d]));
    const lag = {};
    for (const t of st.transports || []) {
      if (t.lag_count > 0) lag[t.scope] = { mean: t.lag_sum_ns / t.lag_count, max: t.lag_max_ns };
    }
    region(st.region).set(st.pop, {
      self: true, state: "heard",
      nodes: [st.node + " (this node)"].concat((st.members || []).filter((m) => m.name !== st.node).map((m) => m.name + " " + m.state)),
      facts: ["epoch " + st.epoch, (st.region_voice ? "speaks for its region, region epoch " + st.region_epoch : "")]
        .concat(lag.pop ? ["lag in PoP " + ms(lag.pop.mean) + " (max " + ms(lag.pop.max) + ")"] : []),
    });
    for (const p of st.remote_pops || []) {
      const d = drift.get(p.region + "/" + p.pop);
      const state = p.partitioned ? (p.last_heard_ms < 0 ? "unheard" : "partitioned") : "heard";
      const facts = [p.last_heard_ms < 0 ? "never heard" : "heard " + p.last_heard_ms + " ms ago"];
      if (p.epoch) facts.push("epoch " + p.epoch);
      if (d) facts.push("clock offset " + ms(d.clock_offset_ns) + (d.skewed ? " (skewed)" : ""));
      if (d && d.rule_mismatches && d.rule_mismatches.length) facts.push(d.rule_mismatches.length + " rule mismatch(es)");
      if (p.expected) facts.push("expected");
      region(p.region).set(p.pop, { state, facts, nodes: [] });
    }
    const box = $("fleet");
    box.replaceChildren();
    for (const [rname, pops] of [...regions.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
      const all = [...pops.values()];
      const cut = all.every((p) => p.state !== "heard");
      const r = el("div", { class: "region" + (cut ? " cut" : ""), "data-region": rname, "data-state": cut ? "cut" : "heard" },
        el("h3", {}, "region " + rname + (cut ? " — cut" : "")));
      for (const [pname, p] of [...pops.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
        const bad = p.state !== "heard";
        const pe = el("div", { class: "pop" + (bad ? " cut" : "") + (p.self ? " self" : ""), "data-pop": rname + "/" + pname, "data-state": p.state },
          el("h4", {}, pname + " ", el("span", { class: "state " + p.state }, bad ? "cut: " + p.state : p.state)),
          el("div", { class: "facts" }, p.facts.filter(Boolean).join(" · ")));
        if (p.nodes.length) pe.append(el("ul", { class: "nodes" }, ...p.nodes.map((n) => el("li", {}, n))));
        r.append(pe);
      }
      box.append(r);
    }
    if (lag.global || lag.region) {
      const g = lag.global || lag.region;
      box.append(el("div", { class: "facts" }, "replication lag from other PoPs: mean " + ms(g.mean) + ", max " + ms(g.max)));
    }
  }

  // Rules with their modes and the mode controls.
  function renderRules(st) {
    const tb = $("rules").tBodies[0];
    tb.replaceChildren();
    for (const r of st.rules || []) {
      const algo = [r.algorithm, r.kind].filter(Boolean).join(" ") || "sliding window";
      const limits = (r.limits && r.limits.length) ? r.limits.map((l) => l.limit + "/" + l.window).join(", ") : r.limit;
      let ov = "";
      if (r.mode_override) ov = r.mode_override.mode + " by " + r.mode_override.set_by + " at " + r.mode_override.set_at;
      const ctl = el("td", {});
      for (const m of ["shadow", "off", "enforce", "config"]) {
        const b = el("button", { type: "button", "data-action": m, title: "set " + r.name + " to " + m + " on every node" }, m);
        b.addEventListener("click", () => setMode(r.name, m));
        ctl.append(b);
      }
      tb.append(el("tr", { "data-rule": r.name },
        el("td", { class: "name" }, r.name), el("td", {}, limits), el("td", {}, r.window), el("td", {}, r.scope),
        el("td", {}, algo), el("td", {}, r.on_partition), el("td", {}, r.keys),
        el("td", { class: "mode " + r.mode, "data-mode": r.mode }, r.mode), el("td", {}, r.config_mode),
        el("td", { class: "override" }, ov), ctl));
    }
  }

  async function setMode(rule, mode) {
    const what = mode === "config" ? "back to the mode of its config file" : "to " + mode;
    if (!window.confirm("Set rule " + rule + " " + what + " on every node?")) return;
    try {
      await api("PUT", "/v1/rules/" + encodeURIComponent(rule) + "/mode", { mode });
      showError("");
    } catch (e) {
      showError(e.unauthorized ? "Setting a mode needs a token allowed to (admin): " + e.message : e.message);
    }
    refresh();
  }

  function renderHot(hk) {
    const box = $("hotkeys");
    box.replaceChildren();
    for (const name of Object.keys(hk.rules).sort()) {
      const keys = hk.rules[name];
      const list = el("ol", {});
      for (const k of keys) {
        const f = k.limit ? k.estimate / k.limit : 0;
        const bar = el("span", { class: "bar" + (f >= 1 ? " over" : f >= 0.8 ? " near" : "") });
        bar.style.width = Math.round(Math.min(f, 1) * 80) + "px";
        list.append(el("li", { "data-key": k.key }, bar, k.key + " " + k.estimate.toFixed(1) + " / " + k.limit));
      }
      box.append(el("div", { class: "hot", "data-rule": name }, el("h3", {}, name),
        keys.length ? list : el("div", { class: "facts" }, "no keys")));
    }
    if (hk.truncated) box.append(el("div", { class: "facts" }, "the first " + hk.scanned + " keys looked at"));
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  function plot(title, samples, secs, series) {
    const W = 300, H = 100, P = 4;
    let max = 1;
    for (const s of series) for (const x of samples) max = Math.max(max, x[s.field] / secs);
    const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img", "aria-label": title });
    series.forEach((s, i) => {
      const pts = samples.map((x, j) => {
        const px = samples.length > 1 ? P + (j * (W - 2 * P)) / (samples.length - 1) : W / 2;
        const py = H - P - ((x[s.field] / secs) * (H - 2 * P)) / max;
        return px.toFixed(1) + "," + py.toFixed(1);
      });
      svg.append(svgEl("polyline", { class: "c" + i, points: pts.join(" ") }));
    });
    const top = svgEl("text", { x: P, y: 11 });
    top.textContent = (max >= 100 ? max.toFixed(0) : max.toPrecision(2)) + "/s";
    svg.append(top);
    const last = samples.length ? samples[samples.length - 1] : null;
    const legend = el("div", { class: "legend" }, ...series.map((s, i) =>
      el("span", {}, el("i", { class: "c" + i }), s.name + (last ? " " + (last[s.field] / secs).toFixed(1) + "/s" : ""))));
    return el("div", { class: "plot", "data-plot": title }, el("h3", {}, title), svg, legend);
  }

  function renderActivity(act) {
    const box = $("activity");
    const s = act.samples || [];
    const secs = act.interval_ms / 1000;
    const span = Math.round((s.length * act.interval_ms) / 60000 * 10) / 10;
    box.replaceChildren(
      plot("decisions", s, secs, [{ name: "allowed", field: "allowed" }, { name: "denied", field: "denied" },
        { name: "shadow denied", field: "shadow_denied" }, { name: "off", field: "off" }]),
      plot("shed", s, secs, [{ name: "shed", field: "shed" }]),
      plot("replication messages", s, secs, [{ name: "in", field: "repl_messages_in" }, { name: "out", field: "repl_messages_out" }]),
      plot("replication bytes", s, secs, [{ name: "in", field: "repl_bytes_in" }, { name: "out", field: "repl_bytes_out" }]),
      el("div", { class: "facts" }, s.length ? "last " + span + " min" : "no samples yet"));
  }

  function renderSummary(st) {
    $("node").textContent = st.replica;
    $("node").setAttribute("data-node", st.node);
    const cut = (st.partitions || []).length;
    $("summary").replaceChildren(
      el("span", {}, "version " + st.version),
      el("span", {}, st.ready ? "ready" : (st.synced ? "not ready" : "syncing")),
      el("span", {}, "up " + st.uptime_seconds + " s"),
      el("span", {}, st.keys + " keys"),
      el("span", { class: cut ? "error" : "" }, cut ? cut + " PoP(s) cut: " + st.partitions.join(", ") : "every PoP heard"));
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      const [st, hk, act] = await Promise.all([api("GET", "/v1/status"), api("GET", "/v1/hotkeys"), api("GET", "/v1/activity")]);
      renderSummary(st);
      renderFleet(st);
      renderRules(st);
      renderHot(hk);
      renderActivity(act);
      $("auth").hidden = true;
      showError("");
      $("updated").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
      document.body.setAttribute("data-loaded", "1");
    } catch (e) {
      if (e.unauthorized) {
        $("auth").hidden = false;
        showError(token ? "The node refused the token: " + e.message : "This node asks for a bearer token (api.token_file).");
        return; // wait for a token
      }
      showError("Cannot read the node: " + e.message);
    }
    timer = setTimeout(refresh, EVERY);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("auth").addEventListener("submit", (ev) => {
      ev.preventDefault();
      token = $("token").value.trim();
      $("token").value = "";
      refresh();
    });
    refresh();
  });
})();
