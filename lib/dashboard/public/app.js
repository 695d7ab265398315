// The dashboard page: which Redis, a summary, and every semaphore as a compact table sorted by
// trouble (expired leases, then the longest wait, then the longest queue), searched and paged on
// the server; a row opens the semaphore's detail card. Polls the JSON API; DOM calls only.
'use strict';
(function () {
  const { el, button, duration, lease, utc, semaphoreUrl, apiUrl, getJson, renderAuth, card, single } = window.RTS;
  const main = document.getElementById('semaphores');
  const updated = document.getElementById('updated');
  const server = document.getElementById('server');
  const summary = document.getElementById('summary');
  const controls = document.getElementById('controls');
  const pager = document.getElementById('pager');
  const open = new Set();
  const view = { q: '', state: 'any', sort: 'trouble', page: 1 };

  function fromQuery() {
    const params = new URLSearchParams(location.search);
    view.q = params.get('q') || '';
    view.state = params.get('state') || 'any';
    view.sort = params.get('sort') || 'trouble';
    view.page = Number(params.get('page')) || 1;
  }

  function query() {
    const params = new URLSearchParams();
    if (view.q) params.set('q', view.q);
    if (view.state !== 'any') params.set('state', view.state);
    if (view.sort !== 'trouble') params.set('sort', view.sort);
    if (view.page > 1) params.set('page', String(view.page));
    return params.toString();
  }

  function select(label, name, options) {
    const node = el('select');
    node.name = name;
    node.setAttribute('aria-label', label);
    for (const [value, text] of options) node.append(Object.assign(el('option', '', text), { value }));
    node.value = view[name];
    node.addEventListener('change', () => {
      view[name] = node.value;
      view.page = 1;
      changed();
    });
    return node;
  }

  function renderControls() {
    const search = window.RTS.field('search', 'search names', {
      placeholder: 'search names (text, or a glob: order:*)',
      value: view.q,
    });
    let typing;
    search.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        view.q = search.value;
        view.page = 1;
        changed();
      }, 200);
    });
    controls.replaceChildren(
      search,
      select('show', 'state', [
        ['any', 'all'],
        ['expired', 'expired leases'],
        ['waiting', 'with waiters'],
        ['held', 'held'],
      ]),
      select('sort by', 'sort', [
        ['trouble', 'most trouble first'],
        ['name', 'name'],
        ['waiting', 'most waiting'],
        ['held', 'most held'],
        ['longest-held', 'longest held'],
      ]),
    );
  }

  function changed() {
    history.replaceState(null, '', location.pathname + (query() ? '?' + query() : ''));
    refresh();
  }

  function stat(className, label, value) {
    const node = el('div', 'stat ' + className);
    node.append(el('span', 'value', value), el('span', 'label', label));
    return node;
  }

  function renderHeader(result) {
    const s = result.server;
    server.textContent = (s.name ? s.name + ' · ' : '') + s.address + ' · ' + s.role + ' · ' + s.version;
    const m = result.summary;
    summary.replaceChildren(
      stat('names', 'names', String(m.names)),
      stat('held', 'tokens held', String(m.held)),
      stat('waiting', 'waiting', String(m.waiting)),
      stat('expired' + (m.expired > 0 ? ' alert' : ''), 'expired leases', String(m.expired)),
      stat('overdue' + (m.overdue > 0 ? ' warn' : ''), 'renewals overdue', String(m.overdue)),
      stat('wait', 'longest wait seen', m.longestWaitMs === null ? '-' : duration(m.longestWaitMs)),
      ...(m.unreadable > 0 ? [stat('unreadable alert', 'unreadable', String(m.unreadable))] : []),
    );
    const notes = [];
    if (!m.listed) notes.push('Listing names: the first scan of this Redis is under way.');
    if (m.pending > 0) notes.push(m.pending + ' names not read yet (read in turn, a bounded number per refresh).');
    if (notes.length > 0) summary.append(el('p', 'note', notes.join(' ')));
  }

  function cell(className, text) {
    return el('td', className, text);
  }

  function row(s) {
    const tr = el('tr', 'row');
    tr.dataset.name = s.name;
    const name = button('name', s.name);
    name.setAttribute('aria-expanded', String(open.has(s.name)));
    name.addEventListener('click', () => {
      if (open.has(s.name)) open.delete(s.name);
      else open.add(s.name);
      refresh();
    });
    const link = el('a', 'open', '↗');
    link.href = semaphoreUrl(s.name);
    link.title = 'the page of this semaphore';
    const first = el('td', 'name');
    first.append(name, ' ', link);
    if (s.error !== undefined) {
      tr.classList.add('unreadable');
      const error = el('td', 'state', 'unreadable: ' + s.error);
      error.colSpan = 8;
      tr.append(first, error);
      return tr;
    }
    const state = el('td', 'state');
    if (s.expired > 0) {
      tr.classList.add('expired');
      state.append(el('span', 'mark', s.expired + ' EXPIRED'));
    } else if (s.overdue > 0) {
      tr.classList.add('overdue');
      state.append(el('span', 'mark', s.overdue + ' overdue'));
    } else state.textContent = s.waiting > 0 ? 'waiting' : s.held > 0 ? 'held' : 'idle';
    tr.append(
      first,
      state,
      cell('num held', s.held + ' / ' + s.tokens),
      cell('num waiting', String(s.waiting)),
      cell('wait', s.longestWaitMs === null ? '' : duration(s.longestWaitMs)),
      cell('age', s.longestHeldMs === null ? '' : duration(s.longestHeldMs)),
      cell('lease', lease(s.leaseLeftMs) || ''),
    );
    return tr;
  }

  async function detail(name) {
    const { status, ok, result } = await getJson(apiUrl(name));
    if (ok) return card(result.semaphore, refresh);
    return el(
      'p',
      'empty error',
      status === 404 ? 'It does not exist any more.' : 'Cannot read it: ' + (result.error && result.error.message),
    );
  }

  async function renderTable(result) {
    const table = el('table', 'overview');
    const head = el('tr');
    for (const heading of ['name', 'state', 'held', 'waiting', 'longest wait', 'longest held', 'first lease end'])
      head.append(el('th', '', heading));
    table.append(el('thead'), el('tbody'));
    table.tHead.append(head);
    const details = await Promise.all(result.semaphores.map((s) => (open.has(s.name) ? detail(s.name) : null)));
    result.semaphores.forEach((s, i) => {
      table.tBodies[0].append(row(s));
      if (details[i]) {
        const tr = el('tr', 'detail');
        const td = el('td');
        td.colSpan = 7;
        td.append(details[i]);
        tr.append(td);
        table.tBodies[0].append(tr);
      }
    });
    if (result.semaphores.length === 0)
      main.replaceChildren(
        el('p', 'empty', result.summary.names === 0 ? 'No semaphores on this Redis yet.' : 'No semaphore matches.'),
      );
    else main.replaceChildren(table);
    if (result.truncated) main.append(el('p', 'empty', 'More semaphores exist than are listed.'));
    const pages = Math.max(1, Math.ceil(result.matched / result.size));
    const from = result.matched === 0 ? 0 : (result.page - 1) * result.size + 1;
    const to = Math.min(result.matched, result.page * result.size);
    const prev = button('prev', '‹ previous');
    prev.disabled = result.page <= 1;
    prev.addEventListener('click', () => ((view.page = result.page - 1), changed()));
    const next = button('next', 'next ›');
    next.disabled = result.page >= pages;
    next.addEventListener('click', () => ((view.page = result.page + 1), changed()));
    pager.replaceChildren(prev, el('span', 'range', from + '–' + to + ' of ' + result.matched), next);
  }

  // One refresh at a time: a refresh asked for while one runs (after a button) runs right after it,
  // so there is only ever one polling loop.
  let timer;
  let running = false;
  let again = false;
  async function refresh() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    clearTimeout(timer);
    try {
      if (single !== null) {
        const { status, ok, result } = await getJson(apiUrl(single));
        if (status === 404)
          main.replaceChildren(el('p', 'empty error', 'Semaphore "' + single + '" does not exist (any more).'));
        else if (!ok) throw new Error((result.error && result.error.message) || 'HTTP ' + status);
        else main.replaceChildren(card(result.semaphore, refresh));
      } else {
        const { status, ok, result } = await getJson(apiUrl() + '?' + query());
        if (!ok) throw new Error((result.error && result.error.message) || 'HTTP ' + status);
        renderHeader(result);
        await renderTable(result);
        window.RTS.forgetCards(open);
      }
      updated.textContent = 'updated ' + utc(new Date().toISOString()) + ' UTC';
      updated.className = '';
    } catch (error) {
      updated.textContent = 'cannot refresh: ' + error.message;
      updated.className = 'error';
    }
    running = false;
    if (again) {
      again = false;
      refresh();
    } else {
      timer = setTimeout(refresh, window.RTS.refreshMs);
    }
  }

  renderAuth();
  if (single === null) {
    fromQuery();
    renderControls();
  }
  refresh();
})();
