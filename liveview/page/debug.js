// The supervision view. It is fed by one EventSource on "events": a
// "status" snapshot on connect and after each burst of events, an "event"
// per supervision event (applied to the rows at once), "dropped" when this
// browser fell behind, "end" once the manager has stopped. It never polls.
// Every value from the server is put in the page as text, never as HTML.
//
// The children are a tree: a group's row is followed by its children's,
// indented, each named by its path ("tenant-a/store"). A group folds; which
// groups are folded is kept for the tab (sessionStorage), across snapshots
// and reloads; a group is unfolded until folded.
'use strict';
(function () {
  const BUCKETS = 20;          // bars in a row's failure chart
  const EVENTS_SHOWN = 60;     // lines in the event log
  const TOKEN_KEY = 'supervision-token';
  const FOLDED_KEY = 'supervision-folded';

  let status = null;           // the last snapshot, with the events applied since
  let offset = 0;              // server clock minus browser clock, in ms
  let events = [];             // the event log, oldest first
  const rows = new Map();      // child path -> row
  const folded = loadFolded(); // the paths of the folded groups
  let es = null;

  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else if (k.startsWith('data-') || k === 'title' || k === 'hidden') e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) if (c != null) e.append(c);
    return e;
  }

  const serverNow = () => Date.now() + offset;

  function loadFolded() {
    try {
      const list = JSON.parse(sessionStorage.getItem(FOLDED_KEY) || '[]');
      return new Set(Array.isArray(list) ? list.filter((p) => typeof p === 'string') : []);
    } catch (_) {
      return new Set();
    }
  }

  function toggleFolded(path) {
    if (folded.has(path)) folded.delete(path);
    else folded.add(path);
    try { sessionStorage.setItem(FOLDED_KEY, JSON.stringify([...folded])); } catch (_) { /* storage off: this page only */ }
    if (status) render();
  }

  // The tree in page order: each child with its depth, whether a folded
  // group hides it, and for a group how many rows it holds.
  function flatten(children) {
    const out = [];
    const walk = (list, depth, hidden) => {
      for (const c of list || []) {
        const entry = { child: c, depth: depth, hidden: hidden, inside: 0 };
        out.push(entry);
        if (holds(c)) {
          const first = out.length;
          walk(c.children, depth + 1, hidden || folded.has(c.name));
          entry.inside = out.length - first;
        }
      }
    };
    walk(children, 0, false);
    return out;
  }

  // holds reports whether c has children of its own: a group, or a
  // fleet's member cluster (a group with a probe).
  function holds(c) { return c.kind === 'group' || c.kind === 'cluster'; }

  // Where the child at path is in the tree: its list and index, or null.
  function locate(list, path) {
    for (let i = 0; i < (list || []).length; i++) {
      const c = list[i];
      if (c.name === path) return { list: list, index: i };
      if (holds(c) && path.startsWith(c.name + '/')) return locate(c.children, path);
    }
    return null;
  }

  // A window in seconds as text: "1m", "1h 30m".
  const span = (seconds) => ago(seconds * 1000).replace(/ 0s$/, '');

  function ago(ms) {
    if (!(ms >= 0)) ms = 0;
    let s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    let m = Math.floor(s / 60); s %= 60;
    if (m < 60) return m + 'm ' + s + 's';
    let h = Math.floor(m / 60); m %= 60;
    if (h < 24) return h + 'h ' + m + 'm';
    return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
  }

  function clock(iso) {
    const d = new Date(iso);
    const pad = (n, w) => String(n).padStart(w || 2, '0');
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3);
  }

  function phaseTone(p) {
    switch (p) {
      case 'Running': return 'ok';
      case 'Failed': return 'bad';
      case 'Stopped': case 'ShuttingDown': case 'Idle': return '';
      default: return 'warn';
    }
  }

  function stateTone(s) {
    switch (s) {
      case 'Running': return 'ok';
      case 'Failed': return 'bad';
      case 'BackingOff': return 'warn';
      case 'Starting': case 'Pending': return 'info';
      default: return '';
    }
  }

  function eventTone(t) {
    switch (t) {
      case 'ChildFailed': case 'Escalated': case 'LeaderLost': case 'ChildUnstopped': return 'bad';
      case 'ChildUnhealthy': case 'EventsDropped': case 'ChildRestarted': return 'warn';
      case 'ChildStarted': case 'LeaderElected': return 'ok';
      default: return 'info';
    }
  }

  function banner(text, tone) {
    const b = $('banner');
    if (!text) { b.hidden = true; return; }
    b.textContent = text;
    b.dataset.tone = tone || '';
    b.hidden = false;
  }

  function setConn(state, text) {
    const c = $('conn');
    c.dataset.state = state;
    c.textContent = text;
  }

  // An error as its message, with its stack folded.
  function errorNode(err) {
    const box = el('div', { class: 'lasterr' }, el('div', { class: 'msg', text: err.message }));
    if (err.stack) {
      box.append(el('details', {}, el('summary', { text: 'stack' }), el('pre', { class: 'stack', text: err.stack })));
    }
    return box;
  }

  // ---- the snapshot ----

  function applyStatus(st) {
    offset = Date.parse(st.time) - Date.now();
    status = st;
    events = (st.events || []).slice();
    render();
    renderEvents();
  }

  function render() {
    const st = status;
    const phase = $('phase');
    phase.textContent = st.phase;
    phase.dataset.tone = phaseTone(st.phase);
    document.title = st.phase + ' · supervision tree';

    const me = $('manager-error');
    if (st.error) {
      const body = $('manager-error-body');
      const key = st.error.message + '\0' + (st.error.stack || '');
      if (body.dataset.key !== key) {
        body.replaceChildren(errorNode(st.error));
        body.dataset.key = key;
      }
      me.hidden = false;
    } else {
      me.hidden = true;
    }

    renderLeadership();
    $('token-panel').hidden = !(st.controls.enabled && st.controls.token);
    document.querySelectorAll('.actions-col').forEach((n) => { n.hidden = !st.controls.enabled; });
    $('spark-head').textContent = 'Failures, last ' + span(st.windowSeconds);

    const seen = new Set();
    const body = document.querySelector('#children tbody');
    const tree = flatten(st.children);
    // The fold buttons' column, only where there is a group to fold.
    $('children').classList.toggle('has-groups', st.children.some((c) => holds(c)));
    tree.forEach((entry, i) => {
      const c = entry.child;
      seen.add(c.name);
      let row = rows.get(c.name);
      if (!row) {
        row = newRow(c.name);
        rows.set(c.name, row);
      }
      if (body.children[i] !== row.tr) body.insertBefore(row.tr, body.children[i] || null);
      updateRow(row, c);
      placeRow(row, entry);
    });
    for (const [name, row] of rows) {
      if (!seen.has(name)) { row.tr.remove(); rows.delete(name); }
    }
    $('child-count').textContent = tree.length === st.children.length ? '(' + tree.length + ')' :
      '(' + st.children.length + ' at the root, ' + tree.length + ' in all)';
    $('no-children').hidden = st.children.length > 0;
    $('footer').textContent = 'Live from events (Server-Sent Events), the same data as status.json. ' +
      'Failure history and events since ' + clock(st.historySince) + ' (server time).';
    tick();
  }

  function renderLeadership() {
    const l = status.leadership;
    $('lead-election').textContent = l.enabled ? 'on' : 'off';
    const role = $('lead-role');
    role.textContent = !l.enabled ? '—' : l.leader ? 'leader' : 'standby';
    role.className = l.enabled ? 'state' : '';
    role.dataset.tone = !l.enabled ? '' : l.leader ? 'ok' : 'info';
    $('lead-identity').textContent = l.identity || '—';
    $('lead-holder').textContent = l.holder || (l.enabled ? 'not seen yet' : '—');
    $('lead-renewal').textContent = l.renewal || (l.enabled ? 'no watchdog' : '—');
    const shards = l.shards || [];
    const cell = $('lead-shards');
    cell.textContent = '';
    if (shards.length === 0) {
      cell.textContent = l.enabled ? 'one lease' : '—';
      return;
    }
    const held = shards.filter((s) => s.held);
    cell.append(held.length + ' of ' + shards.length + ' held here');
    for (const s of shards) {
      const tag = el('span', { class: 'state', text: String(s.index),
        title: s.lease + ': ' + (s.held ? 'held here' : (s.holder ? 'held by ' + s.holder : 'not held')) +
          ((s.children || []).length ? '; ' + s.children.join(', ') : '') });
      tag.dataset.tone = s.held ? 'ok' : s.holder ? 'info' : 'bad';
      tag.dataset.shard = String(s.index);
      cell.append(' ', tag);
    }
  }

  function newRow(name) {
    const cell = (field, cls) => el('td', { 'data-field': field, class: cls || '' });
    const row = {
      tr: el('tr', { 'data-child': name }),
      name: cell('name', 'name'),
      kind: cell('kind'),
      state: cell('state'),
      since: cell('since', 'since'),
      incarnation: cell('incarnation', 'num'),
      restarts: cell('restarts', 'num'),
      failures: cell('failures', 'num'),
      spark: cell('spark', 'spark-cell'),
      health: cell('health'),
      lastError: cell('lastError'),
      actions: cell('actions', 'actions-col'),
      child: null,
    };
    // A path shows its last name, after its groups' path, muted.
    const cut = name.lastIndexOf('/');
    row.twisty = el('span', { class: 'twisty' });
    row.inside = el('span', { class: 'inside muted' });
    if (cut >= 0) row.name.append(row.twisty, el('span', { class: 'path muted', text: name.slice(0, cut + 1) }),
      el('span', { text: name.slice(cut + 1) }), row.inside);
    else row.name.append(row.twisty, el('span', { text: name }), row.inside);
    row.name.title = name;
    row.stateBadge = el('span', { class: 'state' });
    row.exhausted = el('span', { class: 'state exhausted', 'data-field': 'exhausted', 'data-tone': 'bad', text: 'exhausted',
      title: 'a child spent the group\'s restart budget: the group stopped, and stays stopped until started' });
    row.state.append(row.stateBadge); // and row.exhausted while it is, so that the cell's text is the state
    for (const action of ['restart', 'stop', 'start']) {
      const b = el('button', { type: 'button', text: action[0].toUpperCase() + action.slice(1), 'data-action': action });
      b.addEventListener('click', () => control(action, name, b));
      row.actions.append(b);
    }
    row.tr.append(row.name, row.kind, row.state, row.since, row.incarnation, row.restarts,
      row.failures, row.spark, row.health, row.lastError, row.actions);
    return row;
  }

  // placeRow indents the row at its depth, hides it under a folded group,
  // and gives a group its fold button and the count of what it holds.
  function placeRow(row, entry) {
    const c = entry.child;
    row.tr.hidden = entry.hidden;
    row.tr.dataset.depth = String(entry.depth);
    row.name.style.setProperty('--depth', String(entry.depth)); // CSSOM: allowed by the page's CSP
    const isGroup = holds(c);
    row.tr.classList.toggle('group', isGroup);
    if (isGroup && !row.fold) {
      row.fold = el('button', { type: 'button', class: 'fold', 'data-field': 'fold' });
      row.fold.addEventListener('click', () => toggleFolded(c.name));
      row.twisty.replaceChildren(row.fold);
    } else if (!isGroup && row.fold) {
      row.fold = null;
      row.twisty.replaceChildren();
    }
    if (row.fold) {
      const open = !folded.has(c.name);
      row.fold.textContent = open ? '▾' : '▸';
      row.fold.setAttribute('aria-expanded', String(open));
      row.fold.title = (open ? 'Fold ' : 'Unfold ') + c.name;
      row.tr.dataset.folded = open ? '' : '1';
      row.inside.textContent = open ? '' : ' (' + entry.inside + ' inside)';
    } else {
      delete row.tr.dataset.folded;
      row.inside.textContent = '';
    }
  }

  // A group's supervision: its strategy, the budget its children have
  // spent of it in the window, and what a spent budget does.
  function groupInfo(g) {
    const budget = el('span', { 'data-field': 'budget', text: 'budget ' + g.spent + '/' + g.maxRestarts + ' in ' + span(g.restartWindowSeconds),
      title: 'the most restarts any one child has within the window; the budget is spent when a failure finds it at ' + g.maxRestarts });
    budget.dataset.tone = g.exhausted ? 'bad' : g.spent >= g.maxRestarts ? 'warn' : '';
    return el('span', { class: 'group-info' },
      el('span', { 'data-field': 'strategy', text: g.strategy }),
      budget,
      el('span', { 'data-field': 'onExhausted', text: 'on exhausted: ' + g.onExhausted,
        title: g.onExhausted === 'Stop' ? 'a spent budget stops the group; its siblings run on' :
          'a spent budget fails the group to its parent' }));
  }

  // A member cluster: its state (Engaging, Online, Offline, Failed), its
  // last probe's age and error, and its shard and the replica holding it.
  function clusterInfo(cl) {
    const state = el('span', { class: 'state', 'data-field': 'clusterState', text: cl.state,
      title: cl.error || cl.problem || 'the member cluster\'s API server answers its probes' });
    state.dataset.tone = cl.state === 'Online' ? 'ok' : cl.state === 'Engaging' ? 'info' : 'bad';
    const probe = el('span', { 'data-field': 'lastProbe',
      text: cl.lastProbe ? 'probed ' + ago(Date.now() - Date.parse(cl.lastProbe)) + ' ago' : 'not probed yet',
      title: cl.probeError || 'the last probe answered' });
    const parts = [state, probe];
    if (cl.shard !== undefined) {
      parts.push(el('span', { 'data-field': 'clusterShard', text: 'shard ' + cl.shard + (cl.holder ? ' on ' + cl.holder : ''),
        title: 'the shard that runs its subtree, and the replica holding it' }));
    } else if (cl.holder) {
      parts.push(el('span', { 'data-field': 'clusterShard', text: 'on ' + cl.holder }));
    }
    return el('span', { class: 'group-info' }, ...parts);
  }

  function updateRow(row, c) {
    const before = row.child;
    row.child = c;
    row.kind.replaceChildren(c.kind);
    if (c.group) row.kind.append(groupInfo(c.group));
    if (c.cluster) row.kind.append(clusterInfo(c.cluster));
    if (c.group && c.group.exhausted) row.state.append(row.exhausted);
    else row.exhausted.remove();
    row.stateBadge.textContent = c.state;
    row.stateBadge.dataset.tone = stateTone(c.state);
    row.incarnation.textContent = c.incarnation;
    row.restarts.textContent = c.restarts;
    row.failures.textContent = c.failures;

    row.health.replaceChildren(
      el('span', { class: 'health', 'data-tone': c.healthy ? 'ok' : 'bad', text: c.healthy ? 'healthy' : 'unhealthy' }));
    if (c.message) row.health.append(el('span', { class: 'health-msg', text: c.message }));

    const key = c.lastError ? c.lastError.message + '\0' + (c.lastError.stack || '') : '';
    if (row.lastError.dataset.key !== key) { // rebuilt only on change: an open stack stays open
      row.lastError.replaceChildren(c.lastError ? errorNode(c.lastError) : el('span', { class: 'muted', text: '—' }));
      row.lastError.dataset.key = key;
    }

    row.actions.hidden = !status.controls.enabled;
    for (const b of row.actions.querySelectorAll('button')) {
      const a = b.dataset.action;
      b.title = holds(c) ? a[0].toUpperCase() + a.slice(1) + ' the whole group' : '';
      b.disabled = b.dataset.busy === '1' || (a === 'start' && c.state !== 'Stopped') ||
        (a === 'stop' && (c.state === 'Stopped' || c.state === 'Stopping'));
    }

    if (before && (before.restarts !== c.restarts || before.failures !== c.failures || before.state !== c.state ||
        (before.group && c.group && (before.group.spent !== c.group.spent || before.group.exhausted !== c.group.exhausted)))) {
      row.tr.classList.remove('flash');
      void row.tr.offsetWidth; // restart the animation
      row.tr.classList.add('flash');
    }
    drawSpark(row);
    row.since.textContent = ago(serverNow() - Date.parse(c.since));
  }

  // The failures of the window, in BUCKETS bars, the newest on the right.
  function drawSpark(row) {
    const c = row.child;
    const windowMs = status.windowSeconds * 1000;
    const now = serverNow();
    const counts = new Array(BUCKETS).fill(0);
    let total = 0;
    for (const t of c.recentFailures || []) {
      const age = Math.max(0, now - Date.parse(t)); // a clock a little ahead counts as now
      if (age >= windowMs) continue;
      counts[BUCKETS - 1 - Math.floor(age / (windowMs / BUCKETS))]++;
      total++;
    }
    const key = counts.join(',');
    if (row.sparkKey === key) return;
    row.sparkKey = key;
    const max = Math.max(1, ...counts);
    const W = 4, GAP = 1, H = 18;
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('width', BUCKETS * (W + GAP));
    svg.setAttribute('height', H);
    const title = document.createElementNS(ns, 'title');
    title.textContent = total + ' failure' + (total === 1 ? '' : 's') + ' in the last ' + span(status.windowSeconds);
    svg.append(title);
    counts.forEach((n, i) => {
      const r = document.createElementNS(ns, 'rect');
      const h = n === 0 ? 1 : Math.max(3, Math.round((n / max) * H));
      r.setAttribute('x', i * (W + GAP));
      r.setAttribute('y', H - h);
      r.setAttribute('width', W);
      r.setAttribute('height', h);
      if (n === 0) r.setAttribute('class', 'zero');
      svg.append(r);
    });
    row.spark.replaceChildren(svg, el('span', { class: 'muted', text: ' ' + total }));
    row.spark.dataset.total = total;
  }

  function renderEvents() {
    const list = $('events');
    const shown = events.slice(-EVENTS_SHOWN).reverse();
    list.replaceChildren(...shown.map((e) => el('li', {},
      el('span', { class: 't', text: clock(e.time) }),
      el('span', { class: 'ty', 'data-tone': eventTone(e.type), text: e.type }),
      el('span', {}, e.child ? el('strong', { text: e.child + ' ' }) : null,
        e.child ? el('span', { class: 'muted', text: '(' + e.kind + ', restarts ' + e.restarts + ') ' }) : null,
        el('span', { class: 'muted', text: 'phase ' + e.phase + ' ' }),
        e.error ? el('span', { class: 'err', text: e.error.message }) : null))));
  }

  // ---- an event, applied at once; the snapshot that follows has the last word ----

  function applyEvent(e) {
    events.push(e);
    if (events.length > 200) events.shift();
    renderEvents();
    if (!status) return;
    switch (e.type) {
      case 'PhaseChanged': status.phase = e.phase; break;
      case 'LeaderElected': status.leadership.leader = true; break;
      case 'LeaderLost': status.leadership.leader = false; break;
      case 'ShardAcquired':
      case 'ShardReleased':
      case 'ShardLost': {
        const sh = (status.leadership.shards || []).find((s) => s.index === e.shard);
        if (sh) sh.held = e.type === 'ShardAcquired';
        status.leadership.leader = (status.leadership.shards || []).some((s) => s.held);
        renderLeadership();
        break;
      }
      case 'EventsDropped': banner('The manager dropped ' + e.restarts + ' events for this view; resyncing.', 'bad'); break;
    }
    const at = e.child ? locate(status.children, e.child) : null;
    if (at) {
      const c = Object.assign({}, at.list[at.index]);
      switch (e.type) {
        case 'ChildFailed':
          c.state = 'Failed'; c.since = e.time; c.failures++;
          c.lastError = e.error || c.lastError;
          c.recentFailures = (c.recentFailures || []).concat([e.time]);
          break;
        case 'ChildRestarted':
          c.state = 'Starting'; c.since = e.time; c.restarts = e.restarts; c.incarnation = e.restarts + 1; break;
        case 'ChildStarted':
          c.state = 'Running'; c.since = e.time; c.restarts = e.restarts; c.incarnation = e.restarts + 1; break;
        case 'ChildStopped':
          c.state = 'Stopped'; c.since = e.time; break;
        case 'ChildUnhealthy':
          c.healthy = false; if (e.error) c.message = e.error.message; break;
      }
      if (e.type === 'ChildRemoved') at.list.splice(at.index, 1);
      else at.list[at.index] = c;
    }
    render();
  }

  // ---- the controls ----

  async function control(action, name, button) {
    const token = $('token').value;
    button.dataset.busy = '1';
    button.disabled = true;
    banner(action + ' ' + name + '…', '');
    try {
      const resp = await fetch('control', {
        method: 'POST',
        headers: { 'X-Supervision-Token': token, 'Content-Type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ action: action, child: name }),
        credentials: 'same-origin',
      });
      let answer = {};
      try { answer = await resp.json(); } catch (_) { /* not JSON */ }
      if (resp.ok) banner(action + ' ' + name + ': done', 'ok');
      else banner(action + ' ' + name + ' refused (' + resp.status + '): ' + (answer.error || resp.statusText), 'bad');
    } catch (err) {
      banner(action + ' ' + name + ' failed: ' + err, 'bad');
    } finally {
      delete button.dataset.busy;
      if (status) render();
    }
  }

  // ---- the clock: time in state and the charts move with it ----

  function tick() {
    if (!status) return;
    for (const row of rows.values()) {
      row.since.textContent = ago(serverNow() - Date.parse(row.child.since));
      drawSpark(row);
    }
    const l = status.leadership;
    $('lead-since').textContent = l.leader && l.leaderSince ? ago(serverNow() - Date.parse(l.leaderSince)) :
      l.leader ? 'since before this view began' : '—';
  }

  // ---- the stream ----

  function connect() {
    es = new EventSource('events');
    es.addEventListener('open', () => setConn('live', 'live'));
    es.addEventListener('error', () => {
      if (es.readyState === EventSource.CLOSED) setConn('ended', 'disconnected');
      else setConn('reconnecting', 'reconnecting…');
    });
    es.addEventListener('status', (m) => {
      applyStatus(JSON.parse(m.data));
    });
    es.addEventListener('event', (m) => applyEvent(JSON.parse(m.data)));
    es.addEventListener('dropped', (m) => {
      const d = JSON.parse(m.data);
      banner('This browser fell behind: ' + d.dropped + ' events were dropped; resynced from a fresh snapshot.', 'bad');
    });
    es.addEventListener('unavailable', (m) => {
      banner('The manager did not answer: ' + JSON.parse(m.data).error, 'bad');
    });
    es.addEventListener('end', () => {
      es.close();
      setConn('ended', 'manager stopped');
    });
  }

  document.addEventListener('DOMContentLoaded', () => {
    const input = $('token');
    input.value = sessionStorage.getItem(TOKEN_KEY) || '';
    input.addEventListener('input', () => sessionStorage.setItem(TOKEN_KEY, input.value));
    connect();
    setInterval(tick, 1000);
  });
})();
