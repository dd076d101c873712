// The fedcase dashboard: a page over the coordinator's admin API (docs/protocol.md). The admin
// token lives in sessionStorage only and goes out as a bearer token; every value shown is set
// as text, never as HTML, because job names and device info come from users and clients.
"use strict";

const REFRESH_MS = 2000;
const PAGE_SIZE = 50;
const TOKEN_KEY = "fedcase.token";

const $ = (id) => document.getElementById(id);
const VIEWS = ["view-jobs", "view-job", "view-fleet", "view-tenants"];
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  charts: {},
  timer: null,
  refreshes: 0,  // numbers each refresh: an answer to an older one is dropped
  fleet: { offset: 0, sort: "client_id", order: "asc", job: "", available: "", search: "" },
};

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// One admin API call; throws ApiError with the server's message.
async function api(path, options = {}) {
  const response = await fetch(path, {
    method: options.method || "GET",
    headers: { Authorization: "Bearer " + state.token },
    cache: "no-store",
  });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    // an empty or non-JSON answer: the status says enough
  }
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw new ApiError(response.status, message);
  }
  return body;
}

// ---- formatting ----
function fixed(value, digits) {
  return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "–";
}
function smoothed(s, scale = 1, digits = 1) {
  return s && s.count > 0 ? fixed(s.mean * scale, digits) : "–";
}
function age(unixSeconds) {
  if (!unixSeconds) return "never";
  const s = Math.max(0, Date.now() / 1000 - unixSeconds);
  if (s < 120) return Math.round(s) + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}
function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "–" : String(text);
  row.appendChild(td);
  return td;
}
function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// ---- charts: created once per canvas, then updated in place ----
function chart(id, config) {
  let c = state.charts[id];
  if (!c) {
    config.options = Object.assign(
      { animation: false, responsive: true, maintainAspectRatio: false },
      config.options || {});
    c = state.charts[id] = new Chart($(id), config);
  } else {
    c.data.labels = config.data.labels;
    config.data.datasets.forEach((d, i) => {
      if (c.data.datasets[i]) {
        c.data.datasets[i].data = d.data;
        c.data.datasets[i].label = d.label;
      } else {
        c.data.datasets.push(d);
      }
    });
    if (config.options && config.options.scales && config.options.scales.x) {
      c.options.scales.x.title = config.options.scales.x.title;
      c.options.scales.x.ticks = config.options.scales.x.ticks;
    }
    c.update("none");
  }
  // The number of points drawn, for tests and for anyone reading the DOM.
  $(id).dataset.points = String(Math.max(0, ...config.data.datasets.map((d) => d.data.length)));
  return c;
}

// ---- sign in / out ----
function clearToken() {
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
}

function showSignIn(message) {
  stopRefresh();
  $("nav").hidden = true;
  for (const v of VIEWS) $(v).hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("error").textContent = "";
}

async function signIn(token) {
  state.token = token;
  try {
    await api("/v1/admin/jobs");
  } catch (e) {
    const refused = e.status === 401 || e.status === 403;
    if (refused) clearToken();  // a network error or a 429 keeps it for the next try
    else state.token = "";
    showSignIn(refused ? "The coordinator did not accept this token."
                       : "Cannot reach the coordinator: " + e.message);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("signin").hidden = true;
  $("nav").hidden = false;
  route();
}

function signOut() {
  clearToken();
  for (const c of Object.values(state.charts)) c.destroy();
  state.charts = {};
  showSignIn("");
}

// ---- views ----
async function renderJobs() {
  const { jobs } = await api("/v1/admin/jobs");
  $("jobs-empty").hidden = jobs.length > 0;
  replaceRows($("jobs-rows"), jobs.map((j) => {
    const tr = document.createElement("tr");
    tr.dataset.jobId = j.job_id;
    const link = document.createElement("a");
    link.href = "#/jobs/" + j.job_id;
    link.textContent = j.job_id;
    cell(tr, "").replaceChildren(link);
    cell(tr, j.name);
    cell(tr, j.state);
    cell(tr, j.selection_policy);
    cell(tr, j.model);
    cell(tr, j.round + (j.round_open ? " (open)" : ""));
    cell(tr, fixed(j.test_accuracy, 4));
    cell(tr, "").replaceChildren(...controls(j));
    return tr;
  }));
}

// Pause / resume / cancel buttons for what the job's state allows.
function controls(job) {
  const actions = [];
  if (job.state === "running") actions.push("pause");
  if (job.state === "paused") actions.push("resume");
  if (job.state === "running" || job.state === "paused") actions.push("cancel");
  return actions.map((action) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = action;
    b.dataset.action = action;
    b.addEventListener("click", async () => {
      if (action === "cancel" && !confirm("Cancel job " + job.job_id + "? Its open round fails.")) {
        return;
      }
      try {
        await api("/v1/admin/jobs/" + job.job_id + "/" + action, { method: "POST" });
        refresh();
      } catch (e) {
        $("error").textContent = e.message;
      }
    });
    return b;
  });
}

// Saves an export: fetched with the token (a plain link could not send it) and handed to the
// browser under the file name the coordinator gives.
async function download(path) {
  try {
    const response = await fetch(path, {
      headers: { Authorization: "Bearer " + state.token },
      cache: "no-store",
    });
    if (!response.ok) {
      let message = response.statusText;
      try {
        message = (await response.json()).error.message;
      } catch (_) {
        // the status says enough
      }
      throw new Error(message);
    }
    const named = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
    const url = URL.createObjectURL(await response.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = named ? named[1] : "model";
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) {
    $("error").textContent = "download failed: " + e.message;
  }
}

// The job's model versions, newest first, each with a download per export format.
function modelRows(listing) {
  const labels = { torchscript: "TorchScript", npz: "npz", blob: "blob" };
  return listing.models.slice().reverse().map((m) => {
    const tr = document.createElement("tr");
    tr.dataset.version = m.version;
    const marks = [m.version === listing.latest ? "latest" : "",
                   m.version === listing.best ? "best" : ""].filter((x) => x);
    cell(tr, m.version + (marks.length ? " (" + marks.join(", ") + ")" : ""));
    cell(tr, m.round);
    cell(tr, fixed(m.accuracy, 4));
    const td = cell(tr, "");
    for (const format of Object.keys(labels).filter((f) => m.exports[f])) {
      const path = m.exports[format];
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = labels[format] || format;
      b.dataset.format = format;
      b.addEventListener("click", () => download(path));
      td.appendChild(b);
    }
    return tr;
  });
}

// A secure round's stage reached and its dropouts per stage ("" for a plain round).
function secureText(secure) {
  if (!secure) return "";
  const d = secure.dropouts || {};
  const lost = Object.entries(d).filter(([, n]) => n > 0).map(([stage, n]) => n + " at " + stage);
  return (secure.failed_in ? "failed at " + secure.failed_in : secure.stage) +
    (lost.length ? "; dropped " + lost.join(", ") : "");
}

function droppedText(dropped) {
  const reasons = {};
  for (const why of Object.values(dropped || {})) reasons[why] = (reasons[why] || 0) + 1;
  const parts = Object.entries(reasons).map(([why, n]) => n + " " + why);
  return parts.length ? parts.join(", ") : "0";
}

async function renderJob(id) {
  const [job, listing] = await Promise.all([
    api("/v1/admin/jobs/" + encodeURIComponent(id)),
    api("/v1/admin/jobs/" + encodeURIComponent(id) + "/models"),
  ]);
  $("job-title").textContent = "Job " + job.job_id + ": " + job.name;
  const facts = [
    ["state", job.state], ["policy", job.selection_policy], ["model", job.config.model],
    ["parameters", job.parameters + (job.buffer_values ? " (+ " + job.buffer_values +
      " buffer values)" : "")], ["aggregation", job.aggregation],
    ["optimizer", job.server_optimizer], ["round", job.round],
    ["server accuracy", fixed(job.test_accuracy, 4)],
  ];
  if (job.current_round) {
    facts.push(["open round", job.current_round.round + ": " + job.current_round.updates + " of " +
      job.current_round.invited + " updates"]);
    const secure = job.current_round.secure_aggregation;
    if (secure) facts.push(["secure stage", secureText(secure)]);
  }
  if (job.config.mode === "async") {
    const a = job.config.async || {};
    facts.push(["mode", "async: buffers of " + job.config.clients_per_round + ", " +
      (a.concurrency || 4 * job.config.clients_per_round) + " training at once"]);
  }
  if (job.privacy) facts.push(["epsilon", fixed(job.privacy.epsilon, 3)]);
  if (job.result) facts.push(["target reached", "round " + job.result.round]);
  $("job-facts").replaceChildren(...facts.map(([k, v]) => {
    const span = document.createElement("span");
    span.textContent = k + ": " + (v === undefined ? "–" : v);
    return span;
  }));
  $("job-actions").replaceChildren(...controls(job));

  const rounds = job.rounds;
  const evaluated = rounds.filter((r) => r.state === "committed" &&
                                         typeof r.metrics.test_accuracy === "number");
  const byTime = $("job-axis").value === "time";
  const x = (r) => byTime ? r.closed_at - job.created_at : r.round;
  const points = (value) => evaluated.map((r) => ({ x: x(r), y: value(r) }));
  // A round's federated evaluation scores the model it trained from (model_version), as the
  // devices saw it on their held-out samples.
  const federated = rounds.filter((r) => r.state === "committed" && r.metrics.federated_evaluation);
  const fedPoints = (value) => federated.map((r) => ({
    x: byTime ? r.closed_at - job.created_at : r.metrics.federated_evaluation.model_version,
    y: value(r.metrics.federated_evaluation),
  })).filter((p) => typeof p.y === "number");
  chart("chart-accuracy", {
    type: "line",
    data: {
      datasets: [
        { label: "server accuracy (committed model)", data: points((r) => r.metrics.test_accuracy),
          yAxisID: "accuracy", borderColor: "#2563a8", backgroundColor: "#2563a8" },
        { label: "server loss", data: points((r) => r.metrics.test_loss),
          yAxisID: "loss", borderColor: "#c2410c", backgroundColor: "#c2410c" },
        { label: "federated accuracy (model the round sent)",
          data: fedPoints((e) => (e.metrics || {}).accuracy),
          yAxisID: "accuracy", borderColor: "#2563a8", backgroundColor: "#2563a8",
          borderDash: [6, 4] },
        { label: "federated loss", data: fedPoints((e) => e.loss),
          yAxisID: "loss", borderColor: "#c2410c", backgroundColor: "#c2410c", borderDash: [6, 4] },
      ].filter((d) => d.data.length > 0 || d.label.startsWith("server")),
    },
    options: {
      scales: {
        x: { type: "linear", ticks: byTime ? {} : { stepSize: 1 },
             title: { display: true, text: byTime ? "seconds since the job began" : "round" } },
        accuracy: { position: "left", min: 0, max: 1 },
        loss: { position: "right", grid: { drawOnChartArea: false } },
      },
    },
  });
  const closed = rounds.filter((r) => r.state !== "open");
  chart("chart-durations", {
    type: "bar",
    data: {
      labels: closed.map((r) => r.round),
      datasets: [{ label: "seconds", data: closed.map((r) => r.closed_at - r.opened_at),
                   backgroundColor: "#64748b" }],
    },
  });
  // Every invitee is accepted, or dropped: "not needed" (the round filled without it) or for
  // another reason (missed the deadline, round stopped).
  const dropped = (r, notNeeded) => Object.values(r.metrics.dropped || {})
    .filter((why) => (why === "not needed") === notNeeded).length;
  chart("chart-updates", {
    type: "bar",
    data: {
      labels: closed.map((r) => r.round),
      datasets: [
        { label: "accepted", data: closed.map((r) => r.metrics.updates || 0),
          backgroundColor: "#15803d", stack: "s" },
        { label: "not needed", data: closed.map((r) => dropped(r, true)),
          backgroundColor: "#cbd5e1", stack: "s" },
        { label: "dropped (deadline, stopped)", data: closed.map((r) => dropped(r, false)),
          backgroundColor: "#b91c1c", stack: "s" },
      ],
    },
    options: { scales: { x: { stacked: true }, y: { stacked: true } } },
  });
  // An asynchronous job's versions: how far behind their updates trained, mean and largest.
  const buffers = rounds.filter((r) => r.state === "committed" && r.metrics.staleness);
  $("staleness-figure").hidden = buffers.length === 0;
  if (buffers.length) {
    const largest = (r) => Math.max(0, ...Object.keys(r.metrics.staleness).map(Number));
    chart("chart-staleness", {
      type: "line",
      data: {
        labels: buffers.map((r) => r.metrics.model_version),
        datasets: [
          { label: "mean", data: buffers.map((r) => r.metrics.mean_staleness),
            borderColor: "#2563a8" },
          { label: "largest", data: buffers.map(largest), borderColor: "#c2410c" },
        ],
      },
      options: { scales: { x: { title: { display: true, text: "model version" } } } },
    });
  }
  const private_ = rounds.filter((r) => r.metrics.privacy);
  $("privacy-figure").hidden = private_.length === 0;
  if (private_.length) {
    chart("chart-privacy", {
      type: "line",
      data: { labels: private_.map((r) => r.round),
              datasets: [{ label: "epsilon", data: private_.map((r) => r.metrics.privacy.epsilon),
                           borderColor: "#7c3aed" }] },
    });
  }
  const picks = {};
  for (const r of rounds) for (const c of r.selected) picks[c] = (picks[c] || 0) + 1;
  const top = Object.entries(picks).sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, 15);
  chart("chart-preferred", {
    type: "bar",
    data: { labels: top.map(([c]) => "client " + c),
            datasets: [{ label: "times selected", data: top.map(([, n]) => n),
                         backgroundColor: "#2563a8" }] },
    options: { indexAxis: "y" },
  });
  replaceRows($("rounds-rows"), rounds.slice().reverse().map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.round = r.round;
    cell(tr, r.round);
    cell(tr, r.state);
    cell(tr, r.selected.length);
    cell(tr, (r.metrics.finished || []).length);
    cell(tr, droppedText(r.metrics.dropped));
    cell(tr, r.state === "open" ? "–" : fixed(r.closed_at - r.opened_at, 1));
    cell(tr, fixed(r.metrics.test_accuracy, 4));
    cell(tr, secureText(r.metrics.secure_aggregation));
    cell(tr, r.metrics.failure || "");
    return tr;
  }));
  $("models-summary").textContent = listing.models.length + " versions of " +
    listing.parameters + " parameters" +
    (listing.buffer_values ? " and " + listing.buffer_values + " buffer values" : "") +
    "; accuracy by " + listing.evaluation_target + " evaluation";
  replaceRows($("models-rows"), modelRows(listing));
}

async function renderFleet() {
  const f = state.fleet;
  const { jobs } = await api("/v1/admin/jobs");
  const active = jobs.filter((j) => j.state === "running" || j.state === "paused");
  if (f.job && !active.some((j) => String(j.job_id) === f.job)) f.job = "";
  $("fleet-job").replaceChildren(...[{ job_id: "", name: "first active" }, ...active].map((j) => {
    const o = document.createElement("option");
    o.value = String(j.job_id);
    o.textContent = j.job_id === "" ? j.name : j.job_id + ": " + j.name;
    o.selected = String(j.job_id) === f.job;
    return o;
  }));
  const params = new URLSearchParams({ offset: f.offset, limit: PAGE_SIZE, sort: f.sort,
                                       order: f.order });
  if (f.job) params.set("job", f.job);
  if (f.available) params.set("available", f.available);
  if (f.search) params.set("search", f.search);
  const page = await api("/v1/admin/clients?" + params);
  const histogram = page.expected_duration_histogram;
  const job = histogram ? String(histogram.job_id) : f.job;
  $("fleet-summary").textContent = page.total + " clients" +
    (page.matched !== page.total ? ", " + page.matched + " match" : "");
  $("fleet-page").textContent = page.matched === 0 ? "none" :
    (f.offset + 1) + "–" + (f.offset + page.clients.length) + " of " + page.matched;
  $("fleet-prev").disabled = f.offset === 0;
  $("fleet-next").disabled = f.offset + PAGE_SIZE >= page.matched;
  for (const th of $("fleet-head").querySelectorAll("th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === f.sort);
    th.classList.toggle("desc", th.dataset.sort === f.sort && f.order === "desc");
  }
  const mb = 1e-6;
  replaceRows($("fleet-rows"), page.clients.map((c) => {
    const p = c.profile;
    const tr = document.createElement("tr");
    tr.dataset.clientId = c.client_id;
    cell(tr, c.client_id);
    cell(tr, c.available ? "yes" : "no");
    cell(tr, fixed(job ? c.expected_duration_s[job] : undefined, 1));
    cell(tr, smoothed(p.compute_ms_per_sample, 1, 2));
    cell(tr, smoothed(p.download_bytes_per_s, mb, 1));
    cell(tr, smoothed(p.upload_bytes_per_s, mb, 1));
    cell(tr, smoothed(p.storage_read_bytes_per_s, mb, 0));
    cell(tr, smoothed(p.cache_hit_ratio, 100, 0) + (p.cache_hit_ratio.count ? " %" : ""));
    cell(tr, p.utility_round ? fixed(p.utility, 3) : "–");
    cell(tr, p.availability.session_s.count
      ? "sessions ~" + fixed(p.availability.session_s.mean / 60, 0) + " min" : "–");
    cell(tr, p.times_selected);
    cell(tr, age(c.last_seen));
    return tr;
  }));
  const edges = histogram ? histogram.edges : [];
  chart("chart-histogram", {
    type: "bar",
    data: {
      labels: (histogram ? histogram.counts : []).map((_, i) =>
        fixed(edges[i], 1) + "–" + fixed(edges[i + 1], 1)),
      datasets: [{ label: histogram ? "clients (job " + histogram.job_id + ")" : "clients",
                   data: histogram ? histogram.counts : [], backgroundColor: "#2563a8" }],
    },
  });
}

async function renderTenants() {
  const { tenants } = await api("/v1/admin/tenants");
  replaceRows($("tenants-rows"), tenants.map((t) => {
    const tr = document.createElement("tr");
    tr.dataset.tenantId = t.tenant_id;
    cell(tr, t.tenant_id);
    cell(tr, t.name);
    cell(tr, t.weight);
    cell(tr, t.active_jobs);
    cell(tr, fixed(t.counter, 1));
    cell(tr, fixed(t.client_seconds, 0));
    cell(tr, fixed(100 * t.share, 1) + " %");
    cell(tr, t.throttle_events);
    return tr;
  }));
  chart("chart-shares", {
    type: "bar",
    data: { labels: tenants.map((t) => t.name),
            datasets: [{ label: "share of client-seconds", data: tenants.map((t) => t.share),
                         backgroundColor: "#2563a8" }] },
    options: { scales: { y: { min: 0, max: 1 } } },
  });
}

// ---- routing and live refresh ----
function currentView() {
  const hash = location.hash || "#/jobs";
  const job = hash.match(/^#\/jobs\/(\d+)$/);
  if (job) return { name: "view-job", render: () => renderJob(job[1]) };
  if (hash === "#/fleet") return { name: "view-fleet", render: renderFleet };
  if (hash === "#/tenants") return { name: "view-tenants", render: renderTenants };
  return { name: "view-jobs", render: renderJobs };
}

function stopRefresh() {
  clearTimeout(state.timer);
  state.timer = null;
}

async function refresh() {
  stopRefresh();
  if (!state.token) return;
  const mine = ++state.refreshes;
  const view = currentView();
  try {
    await view.render();
    if (mine !== state.refreshes) return;  // a newer refresh owns the page and the timer
    $("error").textContent = "";
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (mine !== state.refreshes) return;
    if (e.status === 401 || e.status === 403) {
      clearToken();
      return showSignIn("The coordinator no longer accepts this token.");
    }
    $("error").textContent = e.message || "cannot reach the coordinator";
  }
  // Hidden tabs do not poll; becoming visible refreshes at once.
  if (state.token && !document.hidden) state.timer = setTimeout(refresh, REFRESH_MS);
}

function route() {
  const view = currentView();
  for (const v of VIEWS) $(v).hidden = v !== view.name;
  $("nav-jobs").classList.toggle("current", view.name === "view-jobs" || view.name === "view-job");
  $("nav-fleet").classList.toggle("current", view.name === "view-fleet");
  $("nav-tenants").classList.toggle("current", view.name === "view-tenants");
  refresh();
}

function wire() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    signIn($("token").value.trim());
    $("token").value = "";
  });
  $("sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", () => state.token && route());
  $("job-axis").addEventListener("change", refresh);
  const f = state.fleet;
  const refilter = () => {
    f.offset = 0;
    refresh();
  };
  $("fleet-job").addEventListener("change", (e) => { f.job = e.target.value; refilter(); });
  $("fleet-available").addEventListener("change", (e) => { f.available = e.target.value; refilter(); });
  let typing = null;
  $("fleet-search").addEventListener("input", (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => { f.search = e.target.value.trim(); refilter(); }, 250);
  });
  $("fleet-prev").addEventListener("click", () => { f.offset = Math.max(0, f.offset - PAGE_SIZE); refresh(); });
  $("fleet-next").addEventListener("click", () => { f.offset += PAGE_SIZE; refresh(); });
  for (const th of $("fleet-head").querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      f.order = f.sort === th.dataset.sort && f.order === "asc" ? "desc" : "asc";
      f.sort = th.dataset.sort;
      refilter();
    });
  }
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && state.token) refresh();
  });
}

wire();
if (state.token) {
  signIn(state.token);
} else {
  showSignIn("");
}
