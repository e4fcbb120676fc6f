// ejcloud console: Preact components written with htm, talking only to the REST API (SPEC §7)
// of the scheduler that served this page. Pages are picked by the URL's hash (#/jobs/...), so
// the server serves one page and a reload keeps the view.
import { h, render } from 'preact';
import { useState, useEffect, useCallback, useRef } from 'preact/hooks';
import htm from 'htm';
import uPlot from 'uplot';

const html = htm.bind(h);

// ---------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field || '';
  }
}

// standbySeen is told by api() whether this instance answered as a standby (307) or not (any
// other answer): a leadership won since the banner showed clears it.
let standbySeen = null;

// EVENT_TRACE is the header the history endpoints add when no event trace database is
// configured: their 2.1.5 shapes ({"total":0,"rows":[]}) cannot say it.
const EVENT_TRACE = 'Ejcloud-Event-Trace';

// api calls the REST API. A standby answers every /api path 307 to the leader, whose origin
// the browser would not let this page read: the redirect is not followed but reported.
async function api(method, path, body) {
  // no-store: the console shows the cluster as it is now, and the HTTP cache would also make
  // requests for one URL wait on each other (Chromium's cache lock held by a request that a page
  // left mid-way stalled the next page's GET of the same URL for 20 s). A request that hangs
  // anyway ends in an error after 10 s, so that polled pages say so and try again.
  const opt = {
    method, redirect: 'manual', credentials: 'same-origin', cache: 'no-store',
    headers: { Accept: 'application/json' }, signal: AbortSignal.timeout(10000),
  };
  if (body !== undefined) {
    opt.body = typeof body === 'string' ? body : JSON.stringify(body);
    opt.headers['Content-Type'] = 'application/json';
  }
  let r;
  try {
    r = await fetch(path, opt);
  } catch (e) {
    throw new ApiError(0, e.name === 'TimeoutError' ? 'the scheduler did not answer ' + method + ' ' + path + ' within 10 s' : 'the scheduler cannot be reached: ' + e.message);
  }
  if (r.type === 'opaqueredirect') {
    if (standbySeen) standbySeen(true);
    throw new ApiError(307, 'this scheduler instance is a standby: the leader serves the API');
  }
  if (standbySeen) standbySeen(false);
  if (r.status === 204) return null;
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!r.ok) throw new ApiError(r.status, (data && data.error) || (r.status + ' ' + r.statusText), data && data.field);
  if (data && typeof data === 'object' && r.headers.get(EVENT_TRACE) === 'none') data.eventTraceNone = true;
  return data;
}

const enc = encodeURIComponent;

// useApi loads GET paths (one or several) and reloads them on demand or every `every` ms.
// The next poll is `every` ms after an answer, not on a fixed beat: a beat shorter than the
// answer would drop each answer for the next request's and show nothing but "Loading" (or an
// empty queue) while the server is slow. What it returns belongs to the paths asked for now:
// data read for others (the page or search before) is not shown against these rows.
//
// Each path stands on its own: one that fails keeps its last answer (undefined if it has none)
// and has its own error in errors, and the others are shown all the same — one job's bad cron
// must not blank every job's next fire time, nor one failed read make every row look enabled.
// For several paths, data is the answers in order (undefined: not known), or null until one
// is known; error is the first failing path's error, for the page's banner.
function useApi(paths, every) {
  const key = JSON.stringify(paths);
  const [state, setState] = useState({ key: null, values: [], errors: [] });
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    let live = true;
    let next;
    const list = Array.isArray(paths) ? paths : [paths];
    Promise.allSettled(list.map((p) => (p ? api('GET', p) : Promise.resolve(null))))
      .then((res) => live && setState((s) => {
        const last = s.key === key ? s.values : [];
        return {
          key,
          values: res.map((r, i) => (r.status === 'fulfilled' ? r.value : last[i])),
          errors: res.map((r) => (r.status === 'rejected' ? r.reason : null)),
        };
      }))
      .finally(() => { if (live && every) next = setTimeout(reload, every); });
    return () => { live = false; clearTimeout(next); };
  }, [key, tick, every]);
  const mine = state.key === key;
  const values = mine ? state.values : [];
  const errors = mine ? state.errors : [];
  const error = errors.find((e) => e) || null;
  if (!Array.isArray(paths)) return { data: values[0] === undefined ? null : values[0], error, errors, loading: !mine, reload };
  const known = mine && (paths.length === 0 || values.some((v) => v !== undefined));
  return { data: known ? values : null, error, errors, loading: !mine, reload };
}

// ---------------------------------------------------------------- small pieces

const fmtTime = (v) => {
  if (v === null || v === undefined || v === '') return '';
  const d = new Date(v);
  return isNaN(d) ? String(v) : d.toLocaleString();
};
const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;

// fireTime shows an RFC 3339 fire time (in the job's zone) in the browser's zone, with the
// clock time in the job's own zone beside it.
function FireTime({ at, zone }) {
  const local = fmtTime(at);
  const m = /T(\d\d:\d\d:\d\d)/.exec(at || '');
  return html`<span><time datetime=${at}>${local}</time>${zone && m ? html` <span class="muted">(${m[1]} ${zone})</span>` : ''}</span>`;
}

// stale says that a polled page's refresh failed and what it shows is its last data.
const stale = (e) => (e ? new Error(e.message + ' (showing what was last read)') : null);

function Banner({ error, ok, warn }) {
  if (error) return html`<div class="banner error" role="alert">${error.message || String(error)}</div>`;
  if (warn) return html`<div class="banner warn" role="status">${warn}</div>`;
  if (ok) return html`<div class="banner ok" role="status">${ok}</div>`;
  return null;
}

function Tag({ kind, children }) {
  return html`<span class=${'tag ' + (kind || '')}>${children}</span>`;
}

// Unknown stands for a state not read yet, or whose read failed: "…", never a guess such as
// "enabled" (a Disable button beside a disabled job).
function Unknown({ error }) {
  const why = 'state unknown: ' + (error ? error.message : 'not read yet');
  return html`<span class="tag unknown" title=${why} aria-label=${why}>…</span>`;
}

// at is the answer of the i-th path of a useApi of several: undefined when it is not known.
const at = (d, i) => (d.data && i >= 0 ? d.data[i] : undefined);

let fieldSeq = 0;
// Field is a labelled input with its error beside it (aria-invalid, aria-describedby).
function Field({ label, name, value, onInput, error, type = 'text', options, hint, required, readOnly, wide, step, min, rows }) {
  const id = useRef('f' + (++fieldSeq)).current;
  const errId = id + '-err';
  const common = {
    id, name, 'aria-invalid': error ? 'true' : undefined, 'aria-describedby': error ? errId : (hint ? id + '-hint' : undefined),
    required, readOnly,
  };
  let input;
  if (type === 'checkbox') {
    return html`<label class=${wide ? 'wide' : ''} for=${id}>
      <input type="checkbox" role="switch" ...${common} checked=${!!value} onChange=${(e) => onInput(e.target.checked)} /> ${label}
      ${error ? html`<small id=${errId} class="field-error">${error}</small>` : ''}</label>`;
  }
  if (options) {
    input = html`<select ...${common} value=${value} onChange=${(e) => onInput(e.target.value)}>
      ${options.map((o) => (Array.isArray(o) ? html`<option value=${o[0]}>${o[1]}</option>` : html`<option value=${o}>${o}</option>`))}</select>`;
  } else if (type === 'textarea') {
    input = html`<textarea ...${common} rows=${rows || 2} value=${value} onInput=${(e) => onInput(e.target.value)}></textarea>`;
  } else {
    input = html`<input type=${type} step=${step} min=${min} ...${common} value=${value} onInput=${(e) => onInput(e.target.value)} />`;
  }
  return html`<label class=${wide ? 'wide' : ''} for=${id}>${label}${required ? html` <span aria-hidden="true">*</span>` : ''}
    ${input}
    ${error ? html`<small id=${errId} class="field-error">${error}</small>` : hint ? html`<small id=${id + '-hint'}>${hint}</small>` : ''}</label>`;
}

// Pager pages a list on the client.
function usePages(rows, size) {
  const [page, setPage] = useState(1);
  const pages = Math.max(1, Math.ceil(rows.length / size));
  const p = Math.min(page, pages);
  return { rows: rows.slice((p - 1) * size, p * size), page: p, pages, setPage, total: rows.length };
}

function Pager({ page, pages, setPage, total, label }) {
  return html`<nav class="pager" aria-label=${label + ' pages'}>
    <button class="secondary outline" disabled=${page <= 1} onClick=${() => setPage(page - 1)} aria-label="Previous page">‹</button>
    <span>Page ${page} of ${pages} · ${total} ${total === 1 ? 'row' : 'rows'}</span>
    <button class="secondary outline" disabled=${page >= pages} onClick=${() => setPage(page + 1)} aria-label="Next page">›</button>
  </nav>`;
}

// Confirm is a button that asks again before it acts (no modal: keyboard and tests stay simple).
function Confirm({ label, question, onYes, danger }) {
  const [asking, setAsking] = useState(false);
  if (!asking) return html`<button class=${danger ? 'secondary' : ''} onClick=${() => setAsking(true)}>${label}</button>`;
  return html`<span class="actions" role="group" aria-label=${question}>
    <span>${question}</span>
    <button class="contrast" onClick=${() => { setAsking(false); onYes(); }}>Yes, ${label.toLowerCase()}</button>
    <button class="secondary outline" onClick=${() => setAsking(false)}>Cancel</button></span>`;
}

// useAction runs a write and reports how it went; run resolves to whether it was done. One
// write at a time: a click while one is under way (a double click on Trigger would queue two
// runs) is ignored, and msg.busy lets the buttons show it.
function useAction(after) {
  const [msg, setMsg] = useState({});
  const busy = useRef(false);
  const run = useCallback(async (what, method, path, body) => {
    if (busy.current) return false;
    busy.current = true;
    setMsg((m) => ({ ...m, busy: true }));
    try {
      await api(method, path, body);
      setMsg({ ok: what + ': done' });
      if (after) after();
      return true;
    } catch (e) {
      setMsg({ error: new Error(what + ': ' + e.message) });
      return false;
    } finally {
      busy.current = false;
    }
  }, [after]);
  return [msg, run];
}

// ---------------------------------------------------------------- validation, as the server does it

const NAME = /^[A-Za-z0-9_.-]+$/;
function checkName(field, v) {
  if (!v) return field + ' is required';
  if (v.length > 100) return field + ' must be at most 100 characters, got ' + v.length;
  if (!NAME.test(v)) return field + " may contain only letters, digits, '_', '.' and '-'";
  if (v === '.' || v === '..') return field + ' must not be "' + v + '"';
  return '';
}
const num = (v) => (v === '' || v === null || v === undefined ? NaN : Number(v));

function validateApp(a) {
  const e = {};
  const n = checkName('appName', a.appName); if (n) e.appName = n;
  if (!a.appURL) e.appURL = 'appURL is required';
  else if (/\s/.test(a.appURL)) e.appURL = 'appURL must not contain white space';
  else if (!/^(https?:\/\/|file:\/\/|\/)/.test(a.appURL)) e.appURL = 'appURL must be an http://, https:// or file:// URL or an absolute path, got "' + a.appURL + '"';
  if (!a.bootstrapScript) e.bootstrapScript = 'bootstrapScript is required';
  if (!(num(a.cpuCount) > 0)) e.cpuCount = 'cpuCount must be greater than 0, got ' + a.cpuCount;
  if (!(num(a.memoryMB) >= 32)) e.memoryMB = 'memoryMB must be at least 32, got ' + a.memoryMB;
  const s = num(a.eventTraceSamplingCount);
  if (!(Number.isInteger(s) && s >= 0)) e.eventTraceSamplingCount = 'eventTraceSamplingCount must be at least 0, got ' + a.eventTraceSamplingCount;
  return e;
}

function validateJob(j) {
  const e = {};
  const n = checkName('jobName', j.jobName); if (n) e.jobName = n;
  if (!j.appName) e.appName = 'appName is required';
  if ((j.jobType === 'SIMPLE' || j.jobType === 'DATAFLOW') && !j.jobClass) e.jobClass = 'jobClass is required for ' + j.jobType + ' jobs';
  if (j.jobType === 'SCRIPT' && !j.scriptCommandLine) e.scriptCommandLine = 'scriptCommandLine is required for SCRIPT jobs';
  if (j.jobExecutionType === 'DAEMON' && !j.cron) e.cron = 'cron is required for DAEMON jobs';
  const total = num(j.shardingTotalCount);
  if (!(Number.isInteger(total) && total >= 1 && total <= 10000)) e.shardingTotalCount = 'shardingTotalCount must be 1 to 10000, got ' + j.shardingTotalCount;
  if (!(num(j.cpuCount) >= 0.001)) e.cpuCount = 'cpuCount must be at least 0.001, got ' + j.cpuCount;
  if (!(num(j.memoryMB) >= 1)) e.memoryMB = 'memoryMB must be at least 1, got ' + j.memoryMB;
  if (j.jobPropertiesText) {
    try {
      const p = JSON.parse(j.jobPropertiesText);
      if (typeof p !== 'object' || Array.isArray(p) || p === null || Object.values(p).some((v) => typeof v !== 'string')) throw new Error();
    } catch (x) { e.jobProperties = 'jobProperties must be a JSON object of strings, such as {"key":"value"}'; }
  }
  const o = jobOptions(j);
  if (o.retry) {
    const a = num(j.retryMaxAttempts), b = num(j.retryBackoff), m = num(j.retryMaxBackoff);
    if (!(Number.isInteger(a) && a >= 1 && a <= 100)) e.retryMaxAttempts = 'retry maxAttempts must be 1 to 100, got ' + j.retryMaxAttempts;
    if (!(b >= 0 && b <= 86400)) e.retryBackoff = 'retry backoff must be 0 to 86400 seconds, got ' + j.retryBackoff;
    if (!(m >= 0 && m <= 86400)) e.retryMaxBackoff = 'retry maxBackoff must be 0 to 86400 seconds (0: no bound), got ' + j.retryMaxBackoff;
  }
  if (o.startingDeadline) {
    const d = num(j.startingDeadline);
    if (!Number.isInteger(d)) e.startingDeadline = 'startingDeadline must be an integer, got "' + j.startingDeadline + '"';
    else if (d < 0) e.startingDeadline = 'startingDeadline must be a number of seconds, at least 0 (0: no deadline), got ' + d;
  }
  if (o.shardsIndependent && !j.shardsIndependent) {
    e.concurrencyPolicy = 'concurrencyPolicy Allow runs a shard again while its last run still runs: set shardsIndependent to true to declare that two runs of a shard may overlap';
  }
  if (o.dependsOn) {
    const seen = new Set();
    for (const d of nameList(j.dependsOn)) {
      const n = checkName('dependsOn', d) || (seen.has(d) ? 'dependsOn names "' + d + '" twice' : '');
      if (n) { e.dependsOn = n; break; }
      seen.add(d);
    }
  }
  return e;
}

// jobOptions says which of issue 19's options the server takes for the job as the form has it
// (config.Job.Validate), and so which the form shows and sends: a concurrency policy and retries
// for TRANSIENT jobs, shardsIndependent with Allow only, dependsOn for TRANSIENT jobs with a
// cron, and neither retries nor dependsOn with Allow. Whether the jobs named exist, have a cron,
// or close a cycle is the server's to say. The misfire policy and the starting deadline the
// server takes for any job, but they decide only the slots of a cron that the scheduler fires
// (config.Job.FiredCron: TRANSIENT jobs with a cron; a DAEMON job's executor runs its own), so
// the form shows them there and sends any other job's back as they were.
function jobOptions(j) {
  const transient = j.jobExecutionType === 'TRANSIENT';
  const allow = transient && j.concurrencyPolicy === 'Allow';
  const fired = transient && !!(j.cron || '').trim();
  return {
    concurrencyPolicy: transient, shardsIndependent: allow, retry: transient && !allow, dependsOn: fired && !allow,
    misfirePolicy: fired, startingDeadline: fired,
  };
}

// derivedMisfirePolicy is the misfire policy the scheduler gives a job that names none:
// fireOnce with misfire, skip without (config.Job.EffectiveMisfirePolicy).
const derivedMisfirePolicy = (misfire) => (misfire ? 'fireOnce' : 'skip');

// nameList reads job names separated by commas or spaces (neither is in a valid name).
const nameList = (s) => (s || '').split(/[\s,]+/).filter(Boolean);

// jobErrorKey is the form's field for a 400 naming the job's field: retry's message names which
// of its numbers is wrong ("retry backoff must be …"); the others are about maxAttempts.
function jobErrorKey(e) {
  if (e.field !== 'retry') return e.field;
  const m = /^retry (maxAttempts|backoff|maxBackoff)\b/.exec(e.message);
  return { maxAttempts: 'retryMaxAttempts', backoff: 'retryBackoff', maxBackoff: 'retryMaxBackoff' }[m ? m[1] : 'maxAttempts'];
}

// ---------------------------------------------------------------- Apps

const appDefaults = { appName: '', appURL: '', bootstrapScript: '', cpuCount: '1', memoryMB: '128', appCacheEnable: true, eventTraceSamplingCount: '0' };

function AppsPage({ canWrite }) {
  const apps = useApi('/api/app/list');
  const pg = usePages(apps.data || [], 20);
  const names = pg.rows.map((a) => a.appName); // the rows shown only
  const states = useApi(names.map((n) => '/api/app/' + enc(n) + '/disable'));
  const [msg, run] = useAction(() => { apps.reload(); states.reload(); });
  return html`<section>
    <div class="toolbar"><h1>Apps</h1>${canWrite ? html`<a href=${"#/apps/" + NEW} role="button">Add app</a>` : ''}</div>
    <${Banner} error=${apps.error || states.error || msg.error} ok=${msg.ok} />
    ${apps.loading ? html`<p aria-busy="true">Loading…</p>` : html`<div class="scroll"><table class="striped">
      <thead><tr><th scope="col">App</th><th scope="col">URL</th><th scope="col">CPU</th><th scope="col">Memory (MB)</th><th scope="col">State</th>${canWrite ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
      <tbody>${pg.rows.map((a) => {
        const i = names.indexOf(a.appName);
        const off = at(states, i);
        return html`<tr key=${a.appName}>
          <td><a href=${'#/apps/' + enc(a.appName)}>${a.appName}</a></td><td>${a.appURL}</td><td>${a.cpuCount}</td><td>${a.memoryMB}</td>
          <td>${off === true ? html`<${Tag} kind="off">disabled<//>` : off === false ? html`<${Tag} kind="on">enabled<//>` : html`<${Unknown} error=${states.errors[i]} />`}</td>
          ${canWrite ? html`<td class="actions">
            <a role="button" class="outline" href=${'#/apps/' + enc(a.appName) + '/edit'}>Modify</a>
            ${off === true ? html`<button onClick=${() => run('enable ' + a.appName, 'POST', '/api/app/' + enc(a.appName) + '/enable')}>Enable</button>`
              : off === false ? html`<button class="secondary" onClick=${() => run('disable ' + a.appName, 'POST', '/api/app/' + enc(a.appName) + '/disable')}>Disable</button>` : ''}
            <${Confirm} label="Delete" danger question=${'Delete app ' + a.appName + ' and its jobs?'} onYes=${() => run('delete ' + a.appName, 'DELETE', '/api/app/' + enc(a.appName))} />
          </td>` : ''}</tr>`;
      })}
      ${pg.total === 0 ? html`<tr><td colspan="6" class="muted">No apps registered.</td></tr>` : ''}</tbody></table></div>
      <${Pager} ...${pg} label="Apps" />`}
  </section>`;
}

// useForm is what the app and job forms share: the values (set once loaded), the field errors
// and a general one, a Field per value (f), and a submit that validates, lets save send the
// values, and puts a 400 that names one of the fields the form shows beside that field (place
// maps the server's field to the form's key where they differ); a 400 naming a field the form
// does not show (one hidden for the job as it is) is shown above the form, not lost.
function useForm(validate, save, place = (e) => e.field) {
  const [form, setForm] = useState(null);
  const [errors, setErrors] = useState({});
  const [general, setGeneral] = useState(null);
  const shown = useRef(new Set());
  shown.current = new Set(); // the error keys of the fields this render shows (f adds them)
  const set = (k) => (v) => setForm((f) => ({ ...f, [k]: v })); // functional: keystrokes between renders all count
  const submit = async (ev) => {
    ev.preventDefault();
    setGeneral(null);
    const errs = validate(form);
    setErrors(errs);
    if (Object.keys(errs).length) { focusError(); return; }
    try {
      await save(form);
    } catch (e) {
      const k = e.field && place(e);
      if (k && shown.current.has(k)) { setErrors({ [k]: e.message }); focusError(); } else setGeneral(e);
    }
  };
  // errKey: the key of the field's errors when it is not the value's (jobPropertiesText's are jobProperties').
  const f = (k, label, extra = {}) => {
    const { errKey = k, ...rest } = extra;
    shown.current.add(errKey);
    return html`<${Field} name=${k} label=${label} value=${form[k]} onInput=${set(k)} error=${errors[errKey]} ...${rest} />`;
  };
  return { form, setForm, errors, general, submit, f };
}

function AppForm({ name }) {
  const editing = !!name;
  const existing = useApi(editing ? '/api/app/' + enc(name) : null);
  const { form, setForm, general, submit, f } = useForm(validateApp, async (form) => {
    const body = { ...form, cpuCount: num(form.cpuCount), memoryMB: num(form.memoryMB), eventTraceSamplingCount: num(form.eventTraceSamplingCount) };
    await api(editing ? 'PUT' : 'POST', '/api/app', body);
    location.hash = '#/apps/' + enc(form.appName);
  });
  useEffect(() => {
    if (!editing) setForm({ ...appDefaults });
    else if (existing.data) setForm(Object.fromEntries(Object.entries({ ...appDefaults, ...existing.data }).map(([k, v]) => [k, typeof v === 'number' ? String(v) : v])));
  }, [editing, existing.data]);
  if (existing.error) return html`<${Banner} error=${existing.error} />`;
  if (!form) return html`<p aria-busy="true">Loading…</p>`;
  return html`<section>
    <h1>${editing ? 'Modify app ' + name : 'Add an app'}</h1>
    <${Banner} error=${general} />
    <form onSubmit=${submit} novalidate aria-label=${editing ? 'Modify app' : 'Add app'}>
      <div class="grid-form">
        ${f('appName', 'App name', { required: true, readOnly: editing, hint: 'letters, digits, _ . -; at most 100' })}
        ${f('appURL', 'App URL', { required: true, hint: 'http://, https://, file:// or an absolute path; archives are extracted' })}
        ${f('bootstrapScript', 'Bootstrap script', { required: true, wide: true, hint: 'the command that starts the executor in the sandbox' })}
        ${f('cpuCount', 'Executor CPUs', { type: 'number', step: 'any', min: '0' })}
        ${f('memoryMB', 'Executor memory (MB)', { type: 'number', step: 'any', min: '32' })}
        ${f('eventTraceSamplingCount', 'Event trace sampling count', { type: 'number', step: '1', min: '0', hint: 'DAEMON jobs record every N-th run; 0 = all' })}
        ${f('appCacheEnable', 'Use the Mesos fetcher cache', { type: 'checkbox' })}
      </div>
      <div class="actions"><button type="submit">${editing ? 'Save' : 'Add app'}</button><a role="button" class="secondary outline" href="#/apps">Cancel</a></div>
    </form></section>`;
}

function focusError() {
  setTimeout(() => { const el = document.querySelector('[aria-invalid="true"]'); if (el) el.focus(); }, 0);
}

function AppDetail({ name, canWrite }) {
  const d = useApi(['/api/app/' + enc(name), '/api/app/' + enc(name) + '/disable', '/api/job/jobs']);
  const boxes = useApi('/api/operate/sandbox?appName=' + enc(name));
  const [msg, run] = useAction(d.reload);
  const [app, off, jobs] = d.data || [];
  if (app === undefined) return d.errors[0] ? html`<${Banner} error=${d.errors[0]} />` : html`<p aria-busy="true">Loading…</p>`;
  const mine = (jobs || []).filter((j) => j.appName === name);
  return html`<section>
    <div class="toolbar"><h1>App ${name}</h1>${off === true ? html`<${Tag} kind="off">disabled<//>` : off === false ? html`<${Tag} kind="on">enabled<//>` : html`<${Unknown} error=${d.errors[1]} />`}</div>
    <${Banner} error=${msg.error || stale(d.error)} ok=${msg.ok} />
    ${canWrite ? html`<div class="actions">
      <a role="button" class="outline" href=${'#/apps/' + enc(name) + '/edit'}>Modify</a>
      ${off === true ? html`<button onClick=${() => run('enable', 'POST', '/api/app/' + enc(name) + '/enable')}>Enable</button>`
        : off === false ? html`<button class="secondary" onClick=${() => run('disable', 'POST', '/api/app/' + enc(name) + '/disable')}>Disable</button>` : ''}
      <${Confirm} label="Delete" danger question=${'Delete app ' + name + ' and its jobs?'} onYes=${async () => { if (await run('delete', 'DELETE', '/api/app/' + enc(name))) location.hash = '#/apps'; }} />
    </div>` : ''}
    <article><dl class="kv">${Object.entries(app).map(([k, v]) => html`<dt>${k}</dt><dd>${String(v)}</dd>`)}</dl></article>
    <h2>Jobs</h2>
    ${jobs === undefined ? html`<p class="muted">${d.errors[2] ? 'The jobs cannot be read.' : '…'}</p>`
      : mine.length ? html`<ul>${mine.map((j) => html`<li><a href=${'#/jobs/' + enc(j.jobName)}>${j.jobName}</a> <span class="muted">${j.jobExecutionType} ${j.cron || ''}</span></li>`)}</ul>` : html`<p class="muted">No jobs.</p>`}
    <h2>Executor sandboxes</h2>
    ${boxes.error ? html`<p class="muted">${boxes.error.message}</p>` : !boxes.data ? html`<p aria-busy="true">Loading…</p>`
      : boxes.data.length ? html`<ul>${boxes.data.map((b) => html`<li><code>${b.hostname}:${b.path}</code></li>`)}</ul>` : html`<p class="muted">No live executor.</p>`}
  </section>`;
}

// ---------------------------------------------------------------- Jobs

const jobDefaults = {
  jobName: '', appName: '', jobType: 'SCRIPT', jobClass: '', jobExecutionType: 'TRANSIENT', cron: '', timeZone: '',
  shardingTotalCount: '1', shardingItemParameters: '', jobParameter: '', cpuCount: '0.1', memoryMB: '64',
  failover: false, misfire: false, streamingProcess: false, scriptCommandLine: '', placement: 'SPREAD',
  jobShardingStrategyType: 'AVG_ALLOCATION', description: '', jobProperties: {},
  // Issue 19's options; retry's numbers are fields of the form's own (the job has the object
  // retry), and dependsOn is the form's text of names.
  concurrencyPolicy: 'Forbid', shardsIndependent: false, dependsOn: '', retryMaxAttempts: '1', retryBackoff: '0', retryMaxBackoff: '0',
  // '': the default, which follows misfire (derivedMisfirePolicy).
  misfirePolicy: '', startingDeadline: '0',
};

function describeUnplaced(reasons) {
  const say = { cpu: 'not enough CPU', mem: 'not enough memory', integrity: 'fits, but not every shard of the job does', 'no-offers': 'no agent offered resources',
    reserved: 'held for a run that waited longer' };
  const agents = (n) => n + (n === 1 ? ' agent' : ' agents');
  return Object.entries(reasons || {}).map(([r, n]) => r === 'no-offers' ? say[r]
    : r === 'holding' ? agents(n) + ' held for it until their tasks end'
    : (say[r] || r) + ' on ' + agents(n)).join('; ');
}

// GET /api/job/unplaced also says why a job's queued work waits (issue 19): its reasons start
// with "waiting: " (a dependency, a retry's or a failover's backoff, the concurrency policy).
function splitReasons(reasons) {
  const unplaced = {}, waiting = {};
  for (const [r, n] of Object.entries(reasons || {})) (r.startsWith('waiting: ') ? waiting : unplaced)[r] = n;
  return [Object.keys(unplaced).length ? unplaced : null, Object.keys(waiting).length ? waiting : null];
}

// describeWaiting says what queued work waits for; the scheduler's RFC 3339 times (a backoff's
// end) are shown in the browser's zone.
function describeWaiting(reasons) {
  const local = (r) => r.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)/g, (t) => fmtTime(t));
  return Object.entries(reasons || {}).map(([r, n]) => local(r.slice('waiting: '.length)) + ' (' + n + (n === 1 ? ' shard)' : ' shards)')).join('; ');
}

function JobsPage({ canWrite }) {
  const jobs = useApi(['/api/job/jobs', '/api/job/unplaced'], 5000);
  const list = (jobs.data && jobs.data[0]) || [];
  const unplaced = (jobs.data && jobs.data[1]) || {};
  const [q, setQ] = useState('');
  const lq = q.toLowerCase();
  const shown = list.filter((j) => !q || j.jobName.toLowerCase().includes(lq) || j.appName.toLowerCase().includes(lq));
  const pg = usePages(shown, 20);
  // The state and next fire time of the rows shown only: two requests per registered job every
  // 5 s would not do with thousands of them.
  const names = pg.rows.map((j) => j.jobName);
  const states = useApi(names.map((n) => '/api/job/' + enc(n) + '/disable'), 5000);
  // A job's state is disabled when its app is: enabling the job would not run it, so the row
  // says so and points at the app.
  const appNames = [...new Set(pg.rows.map((j) => j.appName))];
  const appStates = useApi(appNames.map((n) => '/api/app/' + enc(n) + '/disable'), 5000);
  const next = useApi(pg.rows.map((j) => (j.cron ? '/api/job/' + enc(j.jobName) + '/next?count=1' : null)), 5000);
  const [msg, run] = useAction(() => { jobs.reload(); states.reload(); appStates.reload(); });
  return html`<section>
    <div class="toolbar"><h1>Jobs</h1>${canWrite ? html`<a href=${"#/jobs/" + NEW} role="button">Add job</a>` : ''}
      <input type="search" aria-label="Search jobs by name or app" placeholder="Search jobs by name or app" value=${q} onInput=${(e) => { setQ(e.target.value); pg.setPage(1); }} /></div>
    <${Banner} error=${jobs.error || states.error || appStates.error || msg.error} ok=${msg.ok} />
    ${jobs.loading ? html`<p aria-busy="true">Loading…</p>` : html`<div class="scroll"><table class="striped">
      <thead><tr><th scope="col">Job</th><th scope="col">App</th><th scope="col">Type</th><th scope="col">Cron</th><th scope="col">Shards</th><th scope="col">Next fire</th><th scope="col">State</th>${canWrite ? html`<th scope="col">Actions</th>` : ''}</tr></thead>
      <tbody>${pg.rows.map((j) => {
        const i = names.indexOf(j.jobName);
        const ai = appNames.indexOf(j.appName);
        const off = at(states, i);
        const appOff = at(appStates, ai);
        // A job is enabled only when it and its app are known to be.
        const stateError = states.errors[i] || appStates.errors[ai];
        const n = at(next, i);
        const nextError = next.errors[i]; // this job's alone: the others' times still show
        const [u, w] = splitReasons(unplaced[j.jobName]);
        return html`<tr key=${j.jobName}>
          <td><a href=${'#/jobs/' + enc(j.jobName)}>${j.jobName}</a></td><td>${j.appName}</td>
          <td>${j.jobType}<br /><span class="muted">${j.jobExecutionType}</span></td><td><code class="nowrap">${j.cron || '—'}</code></td><td>${j.shardingTotalCount}</td>
          <td>${nextError ? html`<small class="field-error next-error">${nextError.message}</small>`
            : n && n[0] ? html`<${FireTime} at=${n[0]} zone=${j.timeZone} />` : html`<span class="muted">${!j.cron ? 'on trigger only' : n === undefined ? '…' : ''}</span>`}</td>
          <td>${appOff === true ? html`<${Tag} kind="off">disabled with its app<//>` : off === true ? html`<${Tag} kind="off">disabled<//>`
            : off === false && appOff === false ? html`<${Tag} kind="on">enabled<//>` : html`<${Unknown} error=${stateError} />`}
            ${u ? html`<br /><span class="tag warn unplaced" title=${describeUnplaced(u)}>unplaced: ${describeUnplaced(u)}</span>` : ''}
            ${w ? html`<br /><span class="tag warn waiting" title=${describeWaiting(w)}>waiting: ${describeWaiting(w)}</span>` : ''}</td>
          ${canWrite ? html`<td class="actions">
            <a role="button" class="outline" href=${'#/jobs/' + enc(j.jobName) + '/edit'}>Modify</a>
            ${j.jobExecutionType === 'TRANSIENT' ? html`<button class="outline" disabled=${msg.busy} onClick=${() => run('trigger ' + j.jobName, 'POST', '/api/job/trigger', j.jobName)}>Trigger</button>` : ''}
            ${appOff === true ? html`<a role="button" class="outline" href=${'#/apps/' + enc(j.appName)}>App ${j.appName}</a>`
              : appOff !== false ? ''
              : off === true ? html`<button disabled=${msg.busy} onClick=${() => run('enable ' + j.jobName, 'POST', '/api/job/' + enc(j.jobName) + '/enable')}>Enable</button>`
              : off === false ? html`<button class="secondary" disabled=${msg.busy} onClick=${() => run('disable ' + j.jobName, 'POST', '/api/job/' + enc(j.jobName) + '/disable')}>Disable</button>` : ''}
            <${Confirm} label="Delete" danger question=${'Delete job ' + j.jobName + '?'} onYes=${() => run('delete ' + j.jobName, 'DELETE', '/api/job/deregister', JSON.stringify(j.jobName))} />
          </td>` : ''}</tr>`;
      })}
      ${pg.total === 0 ? html`<tr><td colspan="8" class="muted">No jobs${q ? ' match' : ' registered'}.</td></tr>` : ''}</tbody></table></div>
      <${Pager} ...${pg} label="Jobs" />
      <p class="muted">Times are in your browser's zone (${browserZone}); the job's own zone is beside each.</p>`}
  </section>`;
}

function JobForm({ name }) {
  const editing = !!name;
  const existing = useApi(editing ? '/api/job/jobs/' + enc(name) : null);
  const apps = useApi('/api/app/list');
  // Without the app list (a 503, a standby) no app can be picked: say why, not that an app is
  // required as if none were registered.
  const validate = (j) => {
    const e = validateJob(j);
    if (!j.appName && apps.error) e.appName = 'the apps cannot be read: ' + apps.error.message;
    return e;
  };
  const { form, setForm, general, submit, f } = useForm(validate, async (form) => {
    const { jobPropertiesText, retryMaxAttempts, retryBackoff, retryMaxBackoff, ...body } = form;
    body.jobProperties = jobPropertiesText ? JSON.parse(jobPropertiesText) : {};
    for (const k of ['shardingTotalCount', 'cpuCount', 'memoryMB']) body[k] = num(body[k]);
    if (!body.timeZone) delete body.timeZone; // the scheduler's zone
    if (body.jobType !== 'DATAFLOW') body.streamingProcess = false; // its box is shown for DATAFLOW only
    // Issue 19's options are sent where the server takes them, as their fields are shown: a
    // value in a field that a switch hid stays in the form, and shows again when switched back.
    // Where an option's field is hidden, what the job was given that the server still takes for
    // it is sent back unchanged (was: the job as loaded; nothing for a new one).
    const o = jobOptions(form);
    const was = (editing && existing.data) || {};
    // A DAEMON job has no concurrency policy, or Forbid if it was given that (the form fills in
    // Forbid for it to show if it becomes TRANSIENT: that one is not sent).
    if (!o.concurrencyPolicy) {
      if (was.jobName && !jobOptions(was).concurrencyPolicy && was.concurrencyPolicy === 'Forbid') body.concurrencyPolicy = 'Forbid';
      else delete body.concurrencyPolicy;
    }
    if (!o.shardsIndependent) delete body.shardsIndependent;
    const retry = { maxAttempts: num(retryMaxAttempts), backoff: num(retryBackoff), maxBackoff: num(retryMaxBackoff) };
    // A job that had no retry and is given none (1 attempt, no backoff) is sent without one, as before.
    if (o.retry && (was.retry || retry.maxAttempts !== 1 || retry.backoff !== 0 || retry.maxBackoff !== 0)) body.retry = retry;
    // A DAEMON or Allow job may have a retry of one attempt (it retries nothing): it goes back
    // as it was. One of more attempts, which the server refuses for them, is dropped.
    else if (!o.retry && was.retry && was.retry.maxAttempts <= 1) body.retry = was.retry;
    else delete body.retry;
    const deps = nameList(body.dependsOn);
    if (o.dependsOn && deps.length) body.dependsOn = deps; else delete body.dependsOn;
    // The misfire policy: the default ('') lets the scheduler derive it from misfire, so that it
    // follows misfire when that is switched. Hidden, it goes back as it was, unless it was the
    // derived one and misfire was switched: then the scheduler derives it again.
    if (o.misfirePolicy) {
      if (!body.misfirePolicy) delete body.misfirePolicy;
    } else if (was.misfirePolicy && !(body.misfire !== was.misfire && was.misfirePolicy === derivedMisfirePolicy(was.misfire))) {
      body.misfirePolicy = was.misfirePolicy;
    } else delete body.misfirePolicy;
    if (o.startingDeadline) body.startingDeadline = num(body.startingDeadline);
    else if (was.startingDeadline) body.startingDeadline = was.startingDeadline;
    else delete body.startingDeadline;
    await api(editing ? 'PUT' : 'POST', editing ? '/api/job/update' : '/api/job/register', body);
    location.hash = '#/jobs/' + enc(form.jobName);
  }, jobErrorKey);
  useEffect(() => {
    const base = editing ? existing.data : {};
    if (!base) return;
    // The job's fields that the form has no field for are kept as they are and sent back.
    const f = { ...jobDefaults, ...base };
    for (const k of Object.keys(jobDefaults)) if (typeof f[k] === 'number') f[k] = String(f[k]);
    // The derived misfire policy shows as the default, which follows misfire.
    if (!f.misfirePolicy || f.misfirePolicy === derivedMisfirePolicy(f.misfire)) f.misfirePolicy = '';
    f.jobPropertiesText = f.jobProperties && Object.keys(f.jobProperties).length ? JSON.stringify(f.jobProperties) : '';
    if (base.retry) {
      f.retryMaxAttempts = String(base.retry.maxAttempts ?? 1);
      f.retryBackoff = String(base.retry.backoff ?? 0);
      f.retryMaxBackoff = String(base.retry.maxBackoff ?? 0);
    }
    f.dependsOn = (base.dependsOn || []).join(', ');
    if (!f.concurrencyPolicy) f.concurrencyPolicy = 'Forbid'; // a DAEMON job has none: Forbid if it becomes TRANSIENT
    setForm(f);
  }, [editing, existing.data]);
  useEffect(() => {
    if (apps.data && apps.data.length) setForm((f) => (f && !f.appName ? { ...f, appName: apps.data[0].appName } : f));
  }, [form && form.appName, apps.data]);
  if (existing.error) return html`<${Banner} error=${existing.error} />`;
  if (!form) return html`<p aria-busy="true">Loading…</p>`;
  const appNames = (apps.data || []).map((a) => a.appName);
  if (form.appName && !appNames.includes(form.appName)) appNames.unshift(form.appName); // the job's own, even unlisted
  const noApp = apps.error ? '(the apps cannot be read)' : apps.data ? '(no app registered)' : '(loading the apps…)';
  const o = jobOptions(form);
  return html`<section>
    <h1>${editing ? 'Modify job ' + name : 'Add a job'}</h1>
    <${Banner} error=${general} />
    ${apps.error ? html`<div class="banner error apps-error" role="alert">The apps cannot be read: ${apps.error.message}${' '}
      <button type="button" class="secondary outline" onClick=${apps.reload}>Read them again</button></div>` : ''}
    ${!editing && apps.data && !apps.data.length ? html`<${Banner} warn="Register an app first: a job runs in an app's executor." />` : ''}
    <form onSubmit=${submit} novalidate aria-label=${editing ? 'Modify job' : 'Add job'}>
      <div class="grid-form">
        ${f('jobName', 'Job name', { required: true, readOnly: editing })}
        ${f('appName', 'App', { required: true, options: appNames.length ? appNames : [['', noApp]] })}
        ${f('jobType', 'Job type', { options: ['SCRIPT', 'SIMPLE', 'DATAFLOW'] })}
        ${f('jobExecutionType', 'Execution type', { options: ['TRANSIENT', 'DAEMON'] })}
        ${f('cron', 'Cron (Quartz)', { hint: 'sec min hour day-of-month month day-of-week [year], e.g. 0/10 * * * * ?; empty: TRANSIENT jobs run on trigger only' })}
        ${f('timeZone', 'Time zone', { hint: 'IANA name such as Asia/Shanghai; empty: the scheduler\'s zone' })}
        ${f('shardingTotalCount', 'Shards', { type: 'number', step: '1', min: '1', required: true })}
        ${f('shardingItemParameters', 'Shard parameters', { hint: 'e.g. 0=a,1=b' })}
        ${f('cpuCount', 'CPUs per shard', { type: 'number', step: 'any', min: '0.001', required: true })}
        ${f('memoryMB', 'Memory per shard (MB)', { type: 'number', step: 'any', min: '1', required: true })}
        ${form.jobType === 'SCRIPT' ? f('scriptCommandLine', 'Script command line', { type: 'textarea', wide: true, required: true })
          : f('jobClass', 'Job class', { required: true, hint: 'the name the job is registered under in the executor' })}
        ${f('jobParameter', 'Job parameter')}
        ${f('placement', 'Placement', { options: ['SPREAD', 'BINPACK'] })}
        ${f('jobShardingStrategyType', 'Sharding strategy', { options: ['AVG_ALLOCATION', 'ODEVITY', 'ROUND_ROBIN'] })}
        ${o.misfirePolicy ? f('misfirePolicy', 'Misfire policy', {
          options: [['', 'Default: ' + derivedMisfirePolicy(form.misfire) + (form.misfire ? ' (misfire on)' : ' (misfire off)')],
            ['fireOnce', 'fireOnce: one catch-up run'], ['fireAll', 'fireAll: a run per missed slot (at most 100)'], ['skip', 'skip: no catch-up run']],
          hint: 'the cron slots missed while no scheduler led; the default follows Misfire' }) : ''}
        ${o.startingDeadline ? f('startingDeadline', 'Starting deadline (s)', { type: 'number', step: '1', min: '0',
          hint: 'a missed slot older than this at a takeover is skipped, whatever the policy; 0: none' }) : ''}
        ${o.concurrencyPolicy ? f('concurrencyPolicy', 'Concurrency policy', {
          options: [['Forbid', 'Forbid: wait for the last run'], ['Replace', 'Replace: kill the last run'], ['Allow', 'Allow: run beside the last run']],
          hint: 'what a fire does that finds the last run still running; Allow takes no retries or dependencies' }) : ''}
        ${o.shardsIndependent ? f('shardsIndependent', 'Shards independent: two runs of a shard may overlap without harm', { type: 'checkbox' }) : ''}
        ${o.retry ? f('retryMaxAttempts', 'Retry: max attempts', { type: 'number', step: '1', min: '1', hint: 'runs of a shard that fails by the job\'s own fault, the first included; 1: no retry' }) : ''}
        ${o.retry ? f('retryBackoff', 'Retry: backoff (s)', { type: 'number', step: 'any', min: '0', hint: 'before the first retry; doubles with each' }) : ''}
        ${o.retry ? f('retryMaxBackoff', 'Retry: max backoff (s)', { type: 'number', step: 'any', min: '0', hint: '0: no bound' }) : ''}
        ${o.dependsOn ? f('dependsOn', 'Depends on', { hint: 'job names, comma-separated: TRANSIENT jobs with a cron whose run of the same time must succeed first' }) : ''}
        ${f('description', 'Description', { wide: true })}
        ${f('jobPropertiesText', 'Job properties (JSON object)', { type: 'textarea', wide: true, errKey: 'jobProperties', hint: 'passed to the executor unchanged' })}
        ${f('failover', 'Failover', { type: 'checkbox' })}
        ${f('misfire', 'Misfire', { type: 'checkbox' })}
        ${form.jobType === 'DATAFLOW' ? f('streamingProcess', 'Streaming process', { type: 'checkbox' }) : ''}
      </div>
      <div class="actions"><button type="submit">${editing ? 'Save' : 'Add job'}</button><a role="button" class="secondary outline" href="#/jobs">Cancel</a></div>
    </form></section>`;
}

// configValue shows a field of a job's config: the jobs it depends on link to their pages, its
// retry and starting deadline are said in words; the rest as the API gives it.
function configValue(k, v) {
  if (k === 'startingDeadline' && typeof v === 'number') return v ? v + ' s: a slot missed by more is skipped' : '0 (none)';
  if (k === 'dependsOn' && Array.isArray(v)) return v.map((d, i) => html`${i ? ', ' : ''}<a href=${'#/jobs/' + enc(d)}>${d}</a>`);
  if (k === 'retry' && v && typeof v === 'object') {
    return 'maxAttempts ' + v.maxAttempts + ' · backoff ' + v.backoff + ' s, doubling · maxBackoff ' + (v.maxBackoff ? v.maxBackoff + ' s' : '0 (no bound)');
  }
  return typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v);
}

function JobDetail({ name, canWrite }) {
  const d = useApi(['/api/job/jobs/' + enc(name), '/api/job/' + enc(name) + '/disable', '/api/job/unplaced', '/api/job/' + enc(name) + '/failure',
    '/api/job/tasks/running', '/api/job/tasks/ready', '/api/job/tasks/failover'], 3000);
  const job = at(d, 0);
  const next = useApi(job && job.cron ? '/api/job/' + enc(name) + '/next?count=5' : null, 5000);
  const app = useApi(job ? '/api/app/' + enc(job.appName) + '/disable' : null, 3000);
  // true, false, or undefined while its app's state is not known (loading, or its read failed)
  const appOff = typeof app.data === 'boolean' ? app.data : undefined;
  const [msg, run] = useAction(() => { d.reload(); app.reload(); });
  if (job === undefined) return d.errors[0] ? html`<${Banner} error=${d.errors[0]} />` : html`<p aria-busy="true">Loading…</p>`;
  const [, off, unplaced, failure, running, ready, failover] = d.data;
  const count = (list, n) => (list === undefined ? '…' : n);
  const [u, w] = splitReasons(unplaced && unplaced[name]);
  const mineRunning = (running || []).filter((t) => t.metaInfo.jobName === name);
  const mineReady = (ready || []).find((r) => r.jobName === name);
  const mineFailover = (failover || []).filter((f) => f.taskInfo.jobName === name);
  return html`<section>
    <div class="toolbar"><h1>Job ${name}</h1>${appOff === true ? html`<${Tag} kind="off">disabled with its app<//>` : off === true ? html`<${Tag} kind="off">disabled<//>`
      : off === false && appOff === false ? html`<${Tag} kind="on">enabled<//>` : html`<${Unknown} error=${d.errors[1] || app.error} />`}</div>
    ${appOff === true ? html`<div class="banner warn" role="status">Its app <a href=${'#/apps/' + enc(job.appName)}>${job.appName}</a> is disabled: none of the app's jobs run until it is enabled.</div>` : ''}
    <${Banner} error=${msg.error || stale(d.error) || (app.error && new Error('the state of app ' + job.appName + ' cannot be read: ' + app.error.message))} ok=${msg.ok} />
    ${canWrite ? html`<div class="actions">
      <a role="button" class="outline" href=${'#/jobs/' + enc(name) + '/edit'}>Modify</a>
      ${job.jobExecutionType === 'TRANSIENT' ? html`<button class="outline" disabled=${msg.busy} onClick=${() => run('trigger', 'POST', '/api/job/trigger', name)}>Trigger</button>` : ''}
      ${appOff !== false ? '' : off === true ? html`<button disabled=${msg.busy} onClick=${() => run('enable', 'POST', '/api/job/' + enc(name) + '/enable')}>Enable</button>`
        : off === false ? html`<button class="secondary" disabled=${msg.busy} onClick=${() => run('disable', 'POST', '/api/job/' + enc(name) + '/disable')}>Disable</button>` : ''}
      <${Confirm} label="Delete" danger question=${'Delete job ' + name + '?'} onYes=${async () => { if (await run('delete', 'DELETE', '/api/job/deregister', JSON.stringify(name))) location.hash = '#/jobs'; }} />
    </div>` : ''}
    ${u ? html`<div class="banner warn unplaced" role="status"><strong>Waiting in the ready queue:</strong> its shards found no room in the last offer cycle — ${describeUnplaced(u)}.</div>` : ''}
    ${w ? html`<div class="banner warn waiting" role="status"><strong>Waiting:</strong> its queued work waits for ${describeWaiting(w)}.</div>` : ''}
    ${failure && failure.stopped ? html`<div class="banner error" role="status"><strong>Stopped:</strong> ${failure.stop && (failure.stop.reason + ' — ' + (failure.stop.message || ''))}. Enable or trigger the job to try again.</div>` : ''}
    <div class="grid">
      <article><header>Now</header>
        <p>Running shards: <strong>${count(running, mineRunning.length)}</strong>${mineRunning.length ? ' (' + mineRunning.flatMap((t) => t.metaInfo.shardingItems).sort((a, b) => a - b).join(', ') + ')' : ''}</p>
        <p>Ready runs: <strong>${count(ready, mineReady ? mineReady.times : 0)}</strong> · failover shards: <strong>${count(failover, mineFailover.length)}</strong></p>
        ${failure && failure.backoff && failure.backoff.length ? html`<p>Backoff: ${failure.backoff.map((b) => html`<span class="tag warn">shard ${b.shardingItem}: ${b.failures} failures, retry ${fmtTime(b.retryAt)}</span> `)}</p>` : ''}
      </article>
      <article><header>Next fire times</header>
        ${!job.cron ? html`<p class="muted">No cron: runs only when triggered.</p>` : next.error ? html`<p>${next.error.message}</p>` : html`<ol>${(next.data || []).map((t) => html`<li><${FireTime} at=${t} zone=${job.timeZone} /></li>`)}</ol>`}
        <p class="muted">In your zone (${browserZone}); the job's zone in brackets.</p>
      </article>
    </div>
    <article><header>Configuration</header><dl class="kv">${Object.entries(job).map(([k, v]) => html`<dt>${k}</dt><dd>${configValue(k, v)}</dd>`)}</dl></article>
  </section>`;
}

// ---------------------------------------------------------------- Status

function StatusPage() {
  const [auto, setAuto] = useState(true);
  const [tab, setTab] = useState('running');
  const [q, setQ] = useState('');
  const d = useApi(['/api/job/tasks/running', '/api/job/tasks/ready', '/api/job/tasks/failover'], auto ? 2000 : 0);
  // Nothing is said of a queue before it is read (undefined): an empty list is an answer.
  const [running, ready, failover] = d.data || [];
  const match = (s) => !q || s.toLowerCase().includes(q.toLowerCase());
  const rows = {
    running: (running || []).filter((t) => match(t.id)),
    ready: (ready || []).filter((r) => match(r.jobName)),
    failover: (failover || []).filter((f) => match(f.taskInfo.jobName) || match(f.originalTaskId || '')),
  }[tab];
  const pg = usePages(rows, 15);
  const count = (l) => (l === undefined ? '…' : l.length);
  const list = { running, ready, failover }[tab];
  const tabs = [['running', 'Running', count(running)], ['ready', 'Ready', count(ready)], ['failover', 'Failover', count(failover)]];
  return html`<section>
    <div class="toolbar"><h1>Status</h1>
      <label><input type="checkbox" role="switch" checked=${auto} onChange=${(e) => setAuto(e.target.checked)} /> Refresh every 2 s</label>
      <button class="secondary outline" onClick=${d.reload}>Refresh now</button></div>
    <${Banner} error=${d.data ? stale(d.error) : d.error} />
    <div role="tablist" aria-label="Queues" class="toolbar">
      ${tabs.map(([k, label, n]) => html`<button role="tab" id=${'tab-' + k} aria-selected=${tab === k ? 'true' : 'false'} aria-controls="queue"
        class=${tab === k ? '' : 'outline'} onClick=${() => { setTab(k); pg.setPage(1); }}>${label} (${n})</button>`)}
      <input type="search" aria-label="Search the queue" placeholder="Search by job or task id" value=${q} onInput=${(e) => { setQ(e.target.value); pg.setPage(1); }} />
    </div>
    <div id="queue" role="tabpanel" aria-labelledby=${'tab-' + tab} class="scroll">
    ${tab === 'running' ? html`<table class="striped"><thead><tr><th scope="col">Job</th><th scope="col">Shards</th><th scope="col">Task id</th><th scope="col">Agent</th><th scope="col">Type</th><th scope="col">Idle</th></tr></thead>
      <tbody>${pg.rows.map((t) => html`<tr key=${t.id}><td><a href=${'#/jobs/' + enc(t.metaInfo.jobName)}>${t.metaInfo.jobName}</a></td><td>${t.metaInfo.shardingItems.join(', ')}</td><td><code>${t.id}</code></td><td>${t.slaveId}</td><td>${t.type}</td><td>${t.idle ? 'yes' : 'no'}</td></tr>`)}</tbody></table>` : ''}
    ${tab === 'ready' ? html`<table class="striped"><thead><tr><th scope="col">Job</th><th scope="col">Runs waiting</th></tr></thead>
      <tbody>${pg.rows.map((r) => html`<tr key=${r.jobName}><td><a href=${'#/jobs/' + enc(r.jobName)}>${r.jobName}</a></td><td>${r.times}</td></tr>`)}</tbody></table>` : ''}
    ${tab === 'failover' ? html`<table class="striped"><thead><tr><th scope="col">Job</th><th scope="col">Shards</th><th scope="col">Original task id</th></tr></thead>
      <tbody>${pg.rows.map((f) => html`<tr key=${f.originalTaskId + f.taskInfo.shardingItems}><td><a href=${'#/jobs/' + enc(f.taskInfo.jobName)}>${f.taskInfo.jobName}</a></td><td>${f.taskInfo.shardingItems.join(', ')}</td><td><code>${f.originalTaskId}</code></td></tr>`)}</tbody></table>` : ''}
    ${list === undefined ? html`<p aria-busy="true">${d.error ? 'The ' + tab + ' queue cannot be read.' : 'Loading…'}</p>`
      : pg.total === 0 ? html`<p class="muted">The ${tab} queue is empty${q ? ' for this search' : ''}.</p>` : ''}
    </div>
    <${Pager} ...${pg} label="Queue" />
  </section>`;
}

// ---------------------------------------------------------------- History

// toServerTime turns a datetime-local value (the browser's zone) into the API's UTC form.
function toServerTime(v) {
  if (!v) return '';
  const d = new Date(v);
  // RFC 3339 in UTC: the server reads a time without a zone in its own zone.
  return isNaN(d) ? v : d.toISOString().slice(0, 19) + 'Z';
}

const traceKinds = {
  executions: {
    label: 'Execution log',
    filters: [['jobName', 'Job'], ['taskId', 'Task id'], ['hostname', 'Host'], ['ip', 'IP'], ['shardingItem', 'Shard'],
      ['executionSource', 'Source', [['', 'any'], 'NORMAL_TRIGGER', 'MISFIRE', 'FAILOVER']], ['isSuccess', 'Result', [['', 'any'], ['1', 'succeeded'], ['0', 'failed']]]],
    cols: [['jobName', 'Job'], ['shardingItem', 'Shard'], ['hostname', 'Host'], ['ip', 'IP'], ['source', 'Source'], ['startTime', 'Started', 1], ['completeTime', 'Completed', 1], ['success', 'Result'], ['failureCause', 'Failure cause']],
    sort: 'startTime',
  },
  statusTraces: {
    label: 'Status traces',
    filters: [['jobName', 'Job'], ['taskId', 'Task id'], ['originalTaskId', 'Original task id'], ['slaveId', 'Agent'], ['source', 'Source', [['', 'any'], 'CLOUD_SCHEDULER', 'CLOUD_EXECUTOR', 'LITE_EXECUTOR']],
      ['executionType', 'Execution type', [['', 'any'], ['READY', 'READY'], ['FAILOVER', 'FAILOVER']]],
      ['state', 'State', [['', 'any'], 'TASK_STAGING', 'TASK_STARTING', 'TASK_RUNNING', 'TASK_KILLING', 'TASK_FINISHED', 'TASK_FAILED', 'TASK_KILLED',
        'TASK_ERROR', 'TASK_LOST', 'TASK_DROPPED', 'TASK_UNREACHABLE', 'TASK_GONE', 'TASK_GONE_BY_OPERATOR', 'TASK_UNKNOWN']]],
    cols: [['jobName', 'Job'], ['shardingItems', 'Shards'], ['taskId', 'Task id'], ['slaveId', 'Agent'], ['source', 'Source'], ['executionType', 'Execution'], ['state', 'State'], ['message', 'Message'], ['creationTime', 'Time', 1]],
    sort: 'creationTime',
  },
};

const traceNone = 'The event trace is not configured: this scheduler was started without --event-trace-db, so it records no history.';

function TraceTable({ kind }) {
  const k = traceKinds[kind];
  const blank = Object.fromEntries(k.filters.map(([n]) => [n, ''])) ;
  const [filters, setFilters] = useState({ ...blank, startTime: '', endTime: '' });
  const [applied, setApplied] = useState(filters);
  const [page, setPage] = useState(1);
  const [order, setOrder] = useState('desc');
  const per = 20;
  const qs = new URLSearchParams({ per_page: per, page, sort: k.sort, order });
  for (const [n, v] of Object.entries(applied)) if (v) qs.set(n, n === 'startTime' || n === 'endTime' ? toServerTime(v) : v);
  const d = useApi('/api/job/events/' + kind + '?' + qs);
  const errField = d.error && d.error.field;
  const pages = Math.max(1, Math.ceil(((d.data && d.data.total) || 0) / per));
  // Search reads again even when nothing changed: the history has no poll, and this is how
  // to see the runs since.
  const apply = (ev) => { ev.preventDefault(); setPage(1); setApplied({ ...filters }); d.reload(); };
  const fld = (n, label, options, type) => html`<${Field} name=${n} label=${label} value=${filters[n]} options=${options} type=${type}
    onInput=${(v) => setFilters({ ...filters, [n]: v })} error=${errField === n ? d.error.message : ''} />`;
  return html`<div>
    <form onSubmit=${apply} aria-label=${k.label + ' filters'}>
      <div class="grid-form">${k.filters.map(([n, label, options]) => fld(n, label, options))}
        ${fld('startTime', 'From (your time)', null, 'datetime-local')}${fld('endTime', 'To (your time)', null, 'datetime-local')}</div>
      <div class="actions"><button type="submit">Search</button>
        <button type="button" class="secondary outline" onClick=${() => setOrder(order === 'desc' ? 'asc' : 'desc')}>${order === 'desc' ? 'Newest first' : 'Oldest first'}</button></div>
    </form>
    ${d.error && !['startTime', 'endTime', ...k.filters.map((f) => f[0])].includes(errField) ? html`<${Banner} error=${d.error} />` : ''}
    ${d.data && d.data.eventTraceNone ? html`<${Banner} warn=${traceNone} />` : ''}
    <div class="scroll"><table class="striped"><thead><tr>${k.cols.map(([, label]) => html`<th scope="col">${label}</th>`)}</tr></thead>
      <tbody>${((d.data && d.data.rows) || []).map((r) => html`<tr>${k.cols.map(([c, , time]) => html`<td>${time ? fmtTime(r[c])
        : c === 'success' ? (r[c] ? html`<${Tag} kind="on">success<//>` : r.completeTime ? html`<${Tag} kind="off">failed<//>` : html`<${Tag}>running<//>`)
        : Array.isArray(r[c]) ? r[c].join(', ') : String(r[c] === undefined || r[c] === null ? '' : r[c])}</td>`)}</tr>`)}
      ${d.data && d.data.total === 0 ? html`<tr><td colspan=${k.cols.length} class="muted">${d.data.eventTraceNone ? 'Nothing is recorded: the event trace is not configured.'
        : 'No ' + k.label.toLowerCase() + ' recorded for these filters.'}</td></tr>` : ''}</tbody></table></div>
    <${Pager} page=${page} pages=${pages} setPage=${setPage} total=${(d.data && d.data.total) || 0} label=${k.label} />
  </div>`;
}

// Chart draws time series with uPlot; rows are the statistics endpoints' rows.
function Chart({ title, rows, series }) {
  const el = useRef(null);
  useEffect(() => {
    if (!el.current || !rows || !rows.length) return undefined;
    const xs = rows.map((r) => new Date(r.statisticsTime).getTime() / 1000);
    const data = [xs, ...series.map(([k]) => rows.map((r) => r[k]))];
    const width = Math.max(260, el.current.clientWidth);
    const plot = new uPlot({
      width, height: 200, title: '',
      series: [{}, ...series.map(([, label, stroke]) => ({ label, stroke, width: 2 }))],
      axes: [{}, { size: 40 }],
    }, data, el.current);
    return () => plot.destroy();
  }, [rows, series]);
  return html`<article><header>${title}</header>
    ${rows && rows.length ? html`<div ref=${el} role="img" aria-label=${title + ' chart'}></div>`
      : html`<p class="muted">${rows ? 'No statistics recorded in this period.' : 'The statistics cannot be read.'}</p>`}</article>`;
}

const resultSeries = [['successCount', 'succeeded', '#2e7d32'], ['failedCount', 'failed', '#c62828']];
const runningSeries = [['runningCount', 'running', '#1565c0']];
const registerSeries = [['registeredCount', 'registered', '#6a1b9a']];

function Dashboard() {
  const d = useApi(['/api/job/statistics/tasks/results/lastMinute', '/api/job/statistics/tasks/results/lastHour', '/api/job/statistics/tasks/results/lastDay',
    '/api/job/statistics/tasks/results/lastWeek', '/api/job/statistics/jobs/executionType', '/api/job/statistics/tasks/results?since=last24hours',
    '/api/job/statistics/tasks/running?since=lastWeek', '/api/job/statistics/jobs/running?since=lastWeek', '/api/job/statistics/jobs/register?since=lastWeek'], 30000);
  if (d.error && !d.data) return html`<${Banner} error=${d.error} />`;
  if (!d.data) return html`<p aria-busy="true">Loading…</p>`;
  const [m, hr, day, wk, types, results, tasks, jobs, reg] = d.data;
  const banner = stale(d.error);
  const count = (label, r) => html`<div><span class="muted">${label}</span><strong>${r ? r.successCount + ' / ' + r.failedCount : '…'}</strong><span class="muted">succeeded / failed</span></div>`;
  return html`<div>
    ${banner ? html`<${Banner} error=${banner} />` : ''}
    <article><header>Task results</header><div class="counts">
      ${count('last minute', m)}${count('last hour', hr)}${count('last day', day)}${count('last week', wk)}
      <div><span class="muted">jobs</span><strong>${types ? types.transientJobCount + ' / ' + types.daemonJobCount : '…'}</strong><span class="muted">transient / daemon</span></div>
    </div></article>
    <div class="charts">
      <${Chart} title="Task results, last 24 hours" rows=${results} series=${resultSeries} />
      <${Chart} title="Running tasks, last week" rows=${tasks} series=${runningSeries} />
      <${Chart} title="Running jobs, last week" rows=${jobs} series=${runningSeries} />
      <${Chart} title="Registered jobs, last week" rows=${reg} series=${registerSeries} />
    </div></div>`;
}

function HistoryPage() {
  const [tab, setTab] = useState('executions');
  const tabs = [['executions', 'Execution log'], ['statusTraces', 'Status traces'], ['dashboard', 'Dashboard']];
  return html`<section>
    <h1>History</h1>
    <div role="tablist" aria-label="History views" class="toolbar">${tabs.map(([k, label]) => html`<button role="tab" id=${'htab-' + k}
      aria-selected=${tab === k ? 'true' : 'false'} aria-controls="history" class=${tab === k ? '' : 'outline'} onClick=${() => setTab(k)}>${label}</button>`)}</div>
    <div id="history" role="tabpanel" aria-labelledby=${'htab-' + tab}>
      ${tab === 'dashboard' ? html`<${Dashboard} />` : html`<${TraceTable} kind=${tab} key=${tab} />`}
    </div></section>`;
}

// ---------------------------------------------------------------- Operations

function OperationsPage({ canWrite }) {
  const d = useApi('/api/operate/cluster', 5000);
  const [msg, run] = useAction(d.reload);
  const c = d.data;
  const res = (r) => r.cpus.toFixed(3) + ' CPU · ' + Math.round(r.mem) + ' MB'; // shards ask for thousandths
  return html`<section>
    <h1>Operations</h1>
    <${Banner} error=${d.error || msg.error} ok=${msg.ok} />
    ${c ? html`<article><header>Scheduler</header><dl class="kv">
      <dt>Leader</dt><dd><code>${c.leader}</code></dd>
      <dt>Mesos subscription</dt><dd>${c.subscribed ? html`<${Tag} kind="on">subscribed<//>` : html`<${Tag} kind="off">not subscribed<//>`}</dd>
      <dt>Mesos master</dt><dd>${c.master ? html`<code>${c.master}</code>` : html`<span class="muted">none yet</span>`}</dd>
      <dt>Framework id</dt><dd><code>${c.frameworkId || '—'}</code></dd></dl>
      ${canWrite ? html`<footer class="actions">
        <button onClick=${() => run('explicit reconciliation', 'POST', '/api/operate/reconcile/explicit')}>Reconcile explicitly</button>
        <button class="secondary" onClick=${() => run('implicit reconciliation', 'POST', '/api/operate/reconcile/implicit')}>Reconcile implicitly</button>
        <span class="muted">each at most every 10 s</span></footer>` : ''}
    </article>
    <h2>Agents</h2>
    ${c.agentsError ? html`<${Banner} warn=${'The master\'s state cannot be read: ' + c.agentsError} />` : ''}
    <div class="scroll"><table class="striped"><thead><tr><th scope="col">Agent</th><th scope="col">Host</th><th scope="col">State</th><th scope="col">Free</th><th scope="col">Total</th><th scope="col">Executors (tasks)</th></tr></thead>
      <tbody>${c.agents.map((a) => html`<tr key=${a.id}><td><code>${a.id}</code></td><td>${a.hostname}</td>
        <td>${a.active ? html`<${Tag} kind="on">active<//>` : html`<${Tag} kind="off">inactive<//>`}</td>
        <td>${res(a.free)}</td><td>${res(a.total)}</td>
        <td>${a.executors.length ? a.executors.map((e) => html`<div><a href=${'#/apps/' + enc(e.appName)}>${e.appName}</a> (${e.tasks})</div>`) : html`<span class="muted">none</span>`}</td></tr>`)}
      ${c.agents.length === 0 ? html`<tr><td colspan="6" class="muted">No agents.</td></tr>` : ''}</tbody></table></div>` : d.loading ? html`<p aria-busy="true">Loading…</p>` : ''}
  </section>`;
}

// ---------------------------------------------------------------- the frame

// NEW is the route name of the add forms: '+' is in no valid app or job name, so an app or a
// job named "new" still opens.
const NEW = '+new';

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  return { page: parts[0] || 'jobs', name: parts[1] || '', sub: parts[2] || '' };
}

// loadSession asks who the browser signed in as until the scheduler answers. An ask that hangs
// is given up after 5 s and made again: a request a navigation left behind has been seen to
// hold the next page's first request in the browser for good (TestConsole, under load), and
// the console must not stay at "Loading…". A failure is not taken for the guest's role: an
// administrator would lose every write control until a reload.
//
// Asks that keep failing (a 401 that stays, say) are shown after a few, and still made.
async function loadSession(set, fail, signal) {
  for (let wait = 250, tries = 1; !signal.aborted; wait = Math.min(wait * 2, 4000), tries++) {
    let why;
    try {
      const r = await fetch('/console/session', { credentials: 'same-origin', cache: 'no-store', signal: askSignal(signal) });
      if (r.ok) { set(await r.json()); return; }
      why = 'it answered ' + r.status + (r.statusText ? ' ' + r.statusText : '');
    } catch (e) {
      why = e.name === 'TimeoutError' ? 'no answer within 5 s' : e.message;
    }
    if (tries >= 3 && !signal.aborted) fail(new Error('The console cannot learn who you are signed in as (' + tries + ' tries; still trying): ' + why + '.'));
    await new Promise((res) => setTimeout(res, wait));
  }
}

// askSignal gives up an ask after 5 s, or when signal aborts. Browsers without AbortSignal.any
// (Chromium before 116, Firefox before 124, Safari before 17.4) get the 5 s only: calling it
// there threw on every ask, and the console stayed at "Loading…" for good. The loop checks
// signal between asks.
const askSignal = (signal) => (typeof AbortSignal.any === 'function' ? AbortSignal.any([signal, AbortSignal.timeout(5000)]) : AbortSignal.timeout(5000));

function App() {
  const [route, setRoute] = useState(parseRoute());
  const [session, setSession] = useState(null);
  const [sessionError, setSessionError] = useState(null);
  const [standby, setStandby] = useState(false);
  useEffect(() => {
    const on = () => setRoute(parseRoute());
    window.addEventListener('hashchange', on);
    standbySeen = setStandby;
    const stop = new AbortController();
    loadSession(setSession, setSessionError, stop.signal);
    return () => { stop.abort(); window.removeEventListener('hashchange', on); };
  }, []);
  const canWrite = !!session && session.role === 'root';
  const nav = [['apps', 'Apps'], ['jobs', 'Jobs'], ['status', 'Status'], ['history', 'History'], ['operations', 'Operations']];
  const { page, name, sub } = route;
  let body;
  if (!session) body = sessionError ? html`<${Banner} error=${sessionError} />` : html`<p aria-busy="true">Loading…</p>`;
  else if ((name === NEW || sub === 'edit') && !canWrite) body = html`<${Banner} error=${new Error('The guest may only read: signed in as ' + session.role + '.')} />`;
  else if (page === 'apps') body = name === NEW && canWrite ? html`<${AppForm} />` : name && sub === 'edit' && canWrite ? html`<${AppForm} name=${name} key=${name} />`
    : name ? html`<${AppDetail} name=${name} canWrite=${canWrite} key=${name} />` : html`<${AppsPage} canWrite=${canWrite} />`;
  else if (page === 'jobs') body = name === NEW && canWrite ? html`<${JobForm} />` : name && sub === 'edit' && canWrite ? html`<${JobForm} name=${name} key=${name} />`
    : name ? html`<${JobDetail} name=${name} canWrite=${canWrite} key=${name} />` : html`<${JobsPage} canWrite=${canWrite} />`;
  else if (page === 'status') body = html`<${StatusPage} />`;
  else if (page === 'history') body = html`<${HistoryPage} />`;
  else if (page === 'operations') body = html`<${OperationsPage} canWrite=${canWrite} />`;
  else body = html`<${Banner} error=${new Error('no such page: ' + page)} />`;
  return html`
    <header class="container"><nav aria-label="Main">
      <ul><li><a href="#/jobs" class="brand">ejcloud</a></li></ul>
      <ul>${nav.map(([k, label]) => html`<li><a href=${'#/' + k} aria-current=${page === k ? 'page' : undefined}>${label}</a></li>`)}
        ${session ? html`<li><span class="role" title="signed in as">${session.role === 'root' && !session.authenticated ? 'no authentication' : session.role}</span></li>` : ''}</ul>
    </nav></header>
    <main class="container">
      ${standby ? html`<div class="banner warn" role="alert">This scheduler instance is a standby: the API is served by the leader.${' '}
        <a href="/console/leader">Open the leader's console</a>.</div>` : ''}
      ${body}
    </main>`;
}

// On a phone's width tables stack each row as a card (console.css); each cell then shows its
// column's name, which it takes from the table's header whenever the page changes.
function labelCells(root) {
  for (const table of root.querySelectorAll('table')) {
    const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent);
    for (const row of table.querySelectorAll('tbody tr')) {
      [...row.children].forEach((td, i) => { if (heads[i] && td.dataset.label !== heads[i]) td.dataset.label = heads[i]; });
    }
  }
}

const root = document.getElementById('root');
root.textContent = '';
new MutationObserver(() => labelCells(root)).observe(root, { childList: true, subtree: true });
render(html`<${App} />`, root);
