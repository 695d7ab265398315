// The dashboard page: polls the JSON API and renders it with DOM calls only (textContent, never
// innerHTML), so names, tokens and owner labels (user data) can never become markup.
'use strict';
(function () {
  const body = document.body;
  const base = body.dataset.base || '';
  const readOnly = body.dataset.readOnly === 'true';
  const refreshMs = Number(body.dataset.refreshMs) || 1000;
  const single = body.dataset.semaphore === undefined ? null : body.dataset.semaphore;
  const main = document.getElementById('semaphores');
  const updated = document.getElementById('updated');
  const message = document.getElementById('message');
  const SVG = 'http://www.w3.org/2000/svg';
  const ARM_MS = 4000;

  // The bearer token: from the URL fragment (#token=…, never sent to the server), kept for the tab.
  const fromHash = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (fromHash) {
    sessionStorage.setItem('rts-token', decodeURIComponent(fromHash[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  const cards = new Map();
  const armed = new Map();

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // An <input> of `type` with an accessible label and the given properties.
  function field(type, label, properties) {
    const input = Object.assign(el('input'), { type }, properties);
    input.setAttribute('aria-label', label);
    return input;
  }

  function submitButton(className, text) {
    const button = el('button', className, text);
    button.type = 'submit';
    return button;
  }

  // A form of `content` (nodes and text) whose submit runs `submitted` instead of loading a page.
  function inputForm(className, content, submitted) {
    const form = el('form', className);
    form.append(...content);
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      submitted();
    });
    return form;
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return '?';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    const s = Math.floor(ms / 1000);
    const pad = (n) => String(n).padStart(2, '0');
    if (s < 3600) return Math.floor(s / 60) + 'm ' + pad(s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + pad(Math.floor(s / 60) % 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + pad(Math.floor(s / 3600) % 24) + 'h';
  }

  function say(text, isError) {
    message.textContent = text;
    message.className = isError ? 'error' : 'ok';
  }

  function semaphoreUrl(name) {
    return base + '/semaphores/' + encodeURIComponent(name);
  }

  function apiUrl(name, verb) {
    return (
      base + '/api/semaphores' + (name === undefined ? '' : '/' + encodeURIComponent(name)) + (verb ? '/' + verb : '')
    );
  }

  function renderAuth() {
    const auth = document.getElementById('auth');
    if (readOnly) {
      auth.replaceChildren(el('span', 'badge', 'read-only'));
      return;
    }
    const token = sessionStorage.getItem('rts-token');
    if (token) {
      const forget = el('button', 'link', 'forget token');
      forget.type = 'button';
      forget.addEventListener('click', () => {
        sessionStorage.removeItem('rts-token');
        renderAuth();
      });
      auth.replaceChildren(el('span', 'badge ok', 'token set'), forget);
      return;
    }
    const input = field('password', 'bearer token', {
      placeholder: 'bearer token for release buttons',
      autocomplete: 'off',
    });
    const form = inputForm('token-form', [input, submitButton('', 'use token')], () => {
      if (input.value) sessionStorage.setItem('rts-token', input.value);
      renderAuth();
    });
    auth.replaceChildren(form);
  }

  async function post(name, verb, payload) {
    const token = sessionStorage.getItem('rts-token');
    if (!token) {
      say('Enter the bearer token first (top right).', true);
      return;
    }
    try {
      const response = await fetch(apiUrl(name, verb), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token },
        body: JSON.stringify(payload),
      });
      const result = await response.json().catch(() => ({}));
      if (!response.ok) {
        say((result.error && result.error.message) || 'HTTP ' + response.status, true);
        if (response.status === 401) {
          sessionStorage.removeItem('rts-token');
          renderAuth();
        }
      } else if (verb === 'release') {
        say('Released token "' + payload.token + '" of "' + name + '".', false);
      } else {
        say(
          'Released ' + result.released + ' stale token' + (result.released === 1 ? '' : 's') + ' of "' + name + '".',
          false,
        );
      }
    } catch (error) {
      say('Request failed: ' + error.message, true);
    }
    refresh();
  }

  // The time of day (UTC) in the cell, the full timestamp on hover.
  function since(iso) {
    const cell = el('td', 'since', iso ? iso.slice(11, 23) : '?');
    if (iso) cell.title = iso;
    return cell;
  }

  function releaseButton(name, holder) {
    const key = JSON.stringify([name, holder.token, holder.grantId]);
    const button = el('button', 'release');
    button.type = 'button';
    button.dataset.token = holder.token;
    const isArmed = (armed.get(key) || 0) > Date.now();
    button.textContent = isArmed ? 'confirm release' : 'release';
    if (isArmed) button.classList.add('armed');
    button.addEventListener('click', () => {
      if ((armed.get(key) || 0) > Date.now()) {
        armed.delete(key);
        button.disabled = true;
        post(name, 'release', { token: holder.token, grantId: holder.grantId || '' });
      } else {
        armed.set(key, Date.now() + ARM_MS);
        button.textContent = 'confirm release';
        button.classList.add('armed');
        say(
          'Click "confirm release" within ' +
            ARM_MS / 1000 +
            ' s to release token "' +
            holder.token +
            '" of "' +
            name +
            '", held ' +
            duration(holder.heldMs) +
            ' by ' +
            (holder.owner === null ? 'a holder that recorded no owner' : '"' + holder.owner + '"') +
            (holder.grantId ? ' (grant ' + holder.grantId + ')' : '') +
            ". Its holder's unlock will find nothing.",
          false,
        );
      }
    });
    return button;
  }

  function latest(handOff) {
    return handOff.seenWaiting ? '≥ ' + duration(handOff.waitedMs) : 'not seen waiting';
  }

  function chart(handOffs) {
    const width = 260;
    const height = 56;
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    svg.setAttribute('width', String(width));
    svg.setAttribute('height', String(height));
    svg.setAttribute('role', 'img');
    const max = Math.max(100, ...handOffs.map((h) => h.waitedMs));
    const slot = width / 40;
    handOffs.forEach((h, i) => {
      const barHeight = h.seenWaiting ? Math.max(2, (h.waitedMs / max) * (height - 4)) : 2;
      const rect = document.createElementNS(SVG, 'rect');
      rect.setAttribute('x', String(i * slot + 1));
      rect.setAttribute('y', String(height - barHeight));
      rect.setAttribute('width', String(slot - 2));
      rect.setAttribute('height', String(barHeight));
      rect.setAttribute('class', h.seenWaiting ? 'waited' : 'immediate');
      const title = document.createElementNS(SVG, 'title');
      title.textContent =
        'token ' +
        h.token +
        ': ' +
        (h.seenWaiting ? 'waited ≥ ' + duration(h.waitedMs) : 'not seen waiting') +
        ', ' +
        h.at;
      rect.append(title);
      svg.append(rect);
    });
    const label = document.createElementNS(SVG, 'text');
    label.setAttribute('x', String(width - 3));
    label.setAttribute('y', '10');
    label.setAttribute('text-anchor', 'end');
    label.textContent = 'max ' + duration(max);
    svg.append(label);
    return svg;
  }

  // The latest releases operators made (CLI and dashboard), newest first: the semaphore's audit log.
  function auditLog(entries) {
    if (entries.length === 0) return [];
    const list = el('ul');
    for (const entry of entries) {
      const item = el('li', 'audit-entry');
      const time = el('time', '', entry.at.slice(11, 19));
      time.dateTime = entry.at;
      time.title = entry.at;
      const what = entry.token === '' ? entry.action : entry.action + ' of token "' + entry.token + '"';
      const whose = entry.owner === '' ? '' : ' held by "' + entry.owner + '"';
      item.append(time, ' ' + what + whose + ', by ' + entry.by + (entry.reason === '' ? '' : ': ' + entry.reason));
      list.append(item);
    }
    return [el('h3', '', 'Released by operators'), list];
  }

  function card(name) {
    let card = cards.get(name);
    if (card) return card;
    const root = el('section', 'semaphore');
    root.dataset.name = name;
    const title = el('h2');
    const link = el('a', 'name', name);
    link.href = semaphoreUrl(name);
    title.append(link);
    const bar = el('div', 'bar');
    const held = el('div', 'held');
    const free = el('div', 'free');
    bar.append(held, free);
    const counts = el('p', 'counts');
    const holders = el('div', 'holders');
    const figure = el('figure', 'handoffs');
    const columns = el('div', 'columns');
    columns.append(holders, figure);
    const audit = el('div', 'audit');
    root.append(title, bar, counts, columns, audit);
    if (!readOnly) {
      const input = field('number', 'seconds', { min: '1', value: '30' });
      const button = submitButton('release-stale', 'release stale');
      const content = ['Release tokens held longer than ', input, ' s ', button];
      // Armed by the first submit, like a release button: the second within ARM_MS releases.
      let armedUntil = 0;
      const disarm = () => {
        armedUntil = 0;
        button.textContent = 'release stale';
        button.classList.remove('armed');
      };
      const form = inputForm('stale', content, () => {
        const seconds = Number(input.value);
        if (!(seconds > 0)) return say('Give a number of seconds > 0.', true);
        if (armedUntil > Date.now()) {
          disarm();
          post(name, 'release-stale', { olderThanMs: seconds * 1000 });
          return;
        }
        armedUntil = Date.now() + ARM_MS;
        button.textContent = 'confirm release stale';
        button.classList.add('armed');
        setTimeout(() => armedUntil <= Date.now() && disarm(), ARM_MS + 50);
        say(
          'Click "confirm release stale" within ' +
            ARM_MS / 1000 +
            ' s to release every token of "' +
            name +
            "\" whose holder's lease is over, and Ruby gem holders' held longer than " +
            seconds +
            ' s.',
          false,
        );
      });
      root.append(form);
    }
    card = { root, held, free, bar, counts, holders, figure, audit };
    cards.set(name, card);
    return card;
  }

  // A semaphore whose keys Redis refuses to read (a key of the wrong type under its name).
  function unreadable(semaphore) {
    cards.delete(semaphore.name);
    const root = el('section', 'semaphore unreadable');
    root.dataset.name = semaphore.name;
    const title = el('h2');
    title.append(el('span', 'name', semaphore.name));
    root.append(title, el('p', 'error', 'Cannot read it: ' + semaphore.error));
    return root;
  }

  function render(semaphore) {
    if (semaphore.error !== undefined) return unreadable(semaphore);
    const c = card(semaphore.name);
    const total = Math.max(1, semaphore.tokens);
    c.held.style.width = (100 * semaphore.held) / total + '%';
    c.free.style.width = (100 * semaphore.available) / total + '%';
    c.bar.title = semaphore.held + ' held, ' + semaphore.available + ' free';
    c.counts.replaceChildren(
      el('span', 'count tokens', semaphore.tokens + (semaphore.tokens === 1 ? ' token' : ' tokens')),
      el('span', 'count held', semaphore.held + ' held'),
      el('span', 'count free', semaphore.available + ' free'),
      el('span', 'count waiting' + (semaphore.waiting > 0 ? ' busy' : ''), semaphore.waiting + ' waiting'),
    );
    if (semaphore.holders.length === 0) {
      c.holders.replaceChildren(el('p', 'empty', 'No holders.'));
    } else {
      const table = el('table');
      const head = el('tr');
      for (const heading of ['token', 'held for', 'refreshed ago', 'since (UTC)', 'fence', 'owner', ''])
        head.append(el('th', '', heading));
      table.append(el('thead'), el('tbody'));
      table.tHead.append(head);
      for (const holder of semaphore.holders) {
        const row = el('tr', 'holder');
        row.append(
          el('td', 'token', holder.token),
          el('td', 'age', duration(holder.heldMs)),
          el('td', 'age refreshed', duration(holder.refreshedMs)),
          since(holder.since),
          el('td', 'fence', holder.fence === null ? '-' : String(holder.fence)),
          el('td', 'owner', holder.owner === null ? '(not recorded)' : holder.owner),
        );
        const action = el('td');
        if (!readOnly) action.append(releaseButton(semaphore.name, holder));
        row.append(action);
        table.tBodies[0].append(row);
      }
      c.holders.replaceChildren(table);
    }
    const caption = el(
      'figcaption',
      '',
      semaphore.handOffs.length === 0
        ? 'Hand-offs: none seen yet.'
        : 'Hand-offs (last ' +
            semaphore.handOffs.length +
            '): how long each new holder waited, as sampled; latest ' +
            latest(semaphore.handOffs[semaphore.handOffs.length - 1]) +
            '.',
    );
    c.figure.replaceChildren(chart(semaphore.handOffs), caption);
    c.audit.replaceChildren(...auditLog(semaphore.audit || []));
    return c.root;
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
      const response = await fetch(single === null ? apiUrl() : apiUrl(single), { cache: 'no-store' });
      const result = await response.json();
      if (response.status === 404 && single !== null) {
        main.replaceChildren(el('p', 'empty error', 'Semaphore "' + single + '" does not exist (any more).'));
        cards.clear();
      } else if (!response.ok) {
        throw new Error((result.error && result.error.message) || 'HTTP ' + response.status);
      } else {
        const list = single === null ? result.semaphores : [result.semaphore];
        const seen = new Set(list.map((s) => s.name));
        for (const name of cards.keys()) if (!seen.has(name)) cards.delete(name);
        if (list.length === 0) main.replaceChildren(el('p', 'empty', 'No semaphores on this Redis yet.'));
        else main.replaceChildren(...list.map(render));
        if (result.truncated) main.append(el('p', 'empty', 'More semaphores exist than are shown.'));
      }
      updated.textContent = 'updated ' + new Date().toLocaleTimeString();
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
      timer = setTimeout(refresh, refreshMs);
    }
  }

  renderAuth();
  refresh();
})();
