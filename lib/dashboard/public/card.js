// The detail card of one semaphore (RTS.card): counts, each holder with its lease (an expired one
// marked: a dead holder), the release buttons, the hand-offs seen and the operators' releases.
'use strict';
(function () {
  const { el, field, button, inputForm, duration, lease, utc, say, semaphoreUrl, post, readOnly, ARM_MS } = window.RTS;
  const SVG = 'http://www.w3.org/2000/svg';
  const cards = new Map();
  const armed = new Map();

  // A button that asks for a second click within ARM_MS, saying what it will do, before it acts.
  function armedButton(className, label, key, describe, act) {
    const node = button(className, label);
    const isArmed = () => (armed.get(key) || 0) > Date.now();
    if (isArmed()) {
      node.textContent = 'confirm ' + label;
      node.classList.add('armed');
    }
    node.addEventListener('click', (event) => {
      event.preventDefault();
      if (isArmed()) {
        armed.delete(key);
        node.disabled = true;
        act();
        return;
      }
      armed.set(key, Date.now() + ARM_MS);
      node.textContent = 'confirm ' + label;
      node.classList.add('armed');
      setTimeout(() => {
        if (!isArmed() && node.isConnected) {
          node.textContent = label;
          node.classList.remove('armed');
        }
      }, ARM_MS + 50);
      say('Click "confirm ' + label + '" within ' + ARM_MS / 1000 + ' s to ' + describe() + '.', false);
    });
    return node;
  }

  function releaseButton(name, holder, changed) {
    const key = JSON.stringify([name, holder.token, holder.grantId]);
    const node = armedButton(
      'release',
      'release',
      key,
      () =>
        'release token "' +
        holder.token +
        '" of "' +
        name +
        '", held ' +
        duration(holder.heldMs) +
        ' by ' +
        (holder.owner === null ? 'a holder that recorded no owner' : '"' + holder.owner + '"') +
        (holder.grantId ? ' (grant ' + holder.grantId + ')' : '') +
        ". Its holder's unlock will find nothing",
      () => post(name, 'release', { token: holder.token, grantId: holder.grantId || '' }).then(changed),
    );
    node.dataset.token = holder.token;
    return node;
  }

  // The release-stale form: expired leases by default; Ruby gem holders (no lease) only when ticked.
  function staleForm(name, changed) {
    const ruby = field('checkbox', 'also Ruby gem holders');
    const seconds = field('number', 'seconds', { min: '1', value: '30' });
    const rule = () =>
      'release every token of "' +
      name +
      '" whose holder\'s lease has expired' +
      (ruby.checked ? ", and Ruby gem holders' held longer than " + seconds.value + ' s' : '');
    const go = armedButton('release-stale', 'release expired', 'stale:' + name, rule, () => {
      const payload = {};
      if (ruby.checked) {
        const s = Number(seconds.value);
        if (!(s > 0)) return say('Give a number of seconds > 0.', true);
        payload.rubyOlderThanMs = s * 1000;
      }
      post(name, 'release-stale', payload).then(changed);
    });
    const label = el('label', 'ruby');
    label.append(ruby, ' also Ruby gem holders (they record no lease) held longer than ', seconds, ' s');
    return inputForm('stale', [go, ' ', label], () => go.click());
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
      const time = el('time', '', utc(entry.at));
      time.dateTime = entry.at;
      time.title = entry.at;
      const what = entry.token === '' ? entry.action : entry.action + ' of token "' + entry.token + '"';
      const whose = entry.owner === '' ? '' : ' held by "' + entry.owner + '"';
      item.append(time, ' ' + what + whose + ', by ' + entry.by + (entry.reason === '' ? '' : ': ' + entry.reason));
      list.append(item);
    }
    return [el('h3', '', 'Released by operators'), list];
  }

  function leaseCell(holder) {
    if (holder.leaseMs === null) return el('td', 'lease', 'not recorded (Ruby gem)');
    const text = lease(holder.leaseLeftMs);
    if (text === null) return el('td', 'lease', 'none');
    const cell = el('td', 'lease' + (holder.expired ? ' expired' : holder.overdue ? ' overdue' : ''));
    if (holder.expired) cell.append(el('span', 'mark', 'EXPIRED'), ' ' + text.replace(/^expired /, '') + ' (dead?)');
    else if (holder.overdue) cell.append(el('span', 'mark', 'RENEWAL OVERDUE'), ' ' + text);
    else cell.textContent = text;
    cell.title = 'lease of ' + duration(holder.leaseMs) + (holder.leaseEndsAt ? ', ends ' + holder.leaseEndsAt : '');
    return cell;
  }

  function holdersTable(semaphore, changed) {
    const table = el('table', 'holders-table');
    const head = el('tr');
    for (const heading of ['token', 'lease', 'held for', 'refreshed ago', 'since (UTC)', 'fence', 'owner', ''])
      head.append(el('th', '', heading));
    table.append(el('thead'), el('tbody'));
    table.tHead.append(head);
    for (const holder of semaphore.holders) {
      const row = el('tr', 'holder' + (holder.expired ? ' expired' : holder.overdue ? ' overdue' : ''));
      const since = el('td', 'since', utc(holder.since, true));
      if (holder.since) since.title = holder.since;
      row.append(
        el('td', 'token', holder.token),
        leaseCell(holder),
        el('td', 'age', duration(holder.heldMs)),
        el('td', 'age refreshed', duration(holder.refreshedMs)),
        since,
        el('td', 'fence', holder.fence === null ? '-' : String(holder.fence)),
        el('td', 'owner', holder.owner === null ? '(not recorded)' : holder.owner),
      );
      const action = el('td');
      if (!readOnly) action.append(releaseButton(semaphore.name, holder, changed));
      row.append(action);
      table.tBodies[0].append(row);
    }
    return table;
  }

  function count(className, text) {
    return el('span', 'count ' + className, text);
  }

  // The card of `semaphore` (the API's JSON), kept per name so a form's input survives a refresh.
  function card(semaphore, changed) {
    let c = cards.get(semaphore.name);
    if (!c) {
      const root = el('section', 'semaphore');
      root.dataset.name = semaphore.name;
      const title = el('h2');
      const link = el('a', 'name', semaphore.name);
      link.href = semaphoreUrl(semaphore.name);
      title.append(link);
      c = { root, counts: el('p', 'counts'), holders: el('div', 'holders'), figure: el('figure', 'handoffs') };
      c.audit = el('div', 'audit');
      const columns = el('div', 'columns');
      columns.append(c.holders, c.figure);
      root.append(title, c.counts, columns, c.audit);
      if (!readOnly) root.append(staleForm(semaphore.name, changed));
      cards.set(semaphore.name, c);
    }
    c.counts.replaceChildren(
      count('tokens', semaphore.tokens + (semaphore.tokens === 1 ? ' token' : ' tokens')),
      count('held', semaphore.held + ' held'),
      count('free', semaphore.available + ' free'),
      ...(semaphore.collected > 0
        ? [
            count(
              'collected',
              semaphore.collected +
                ' collected' +
                (semaphore.collector ? ' by a waiter for ' + semaphore.collector.permits : ''),
            ),
          ]
        : []),
      count('waiting', semaphore.waiting + ' waiting'),
      ...(semaphore.expired > 0
        ? [count('expired alert', semaphore.expired + ' expired lease' + (semaphore.expired === 1 ? '' : 's'))]
        : []),
      ...(semaphore.overdue > 0
        ? [count('overdue warn', semaphore.overdue + ' renewal' + (semaphore.overdue === 1 ? '' : 's') + ' overdue')]
        : []),
    );
    c.holders.replaceChildren(
      semaphore.holders.length === 0 ? el('p', 'empty', 'No holders.') : holdersTable(semaphore, changed),
    );
    const handOffs = semaphore.handOffs || [];
    if (handOffs.length === 0) c.figure.replaceChildren();
    else {
      const last = handOffs[handOffs.length - 1];
      c.figure.replaceChildren(
        chart(handOffs),
        el(
          'figcaption',
          '',
          'Hand-offs (last ' +
            handOffs.length +
            '): how long each new holder waited, as sampled; latest ' +
            (last.seenWaiting ? '≥ ' + duration(last.waitedMs) : 'not seen waiting') +
            '.',
        ),
      );
    }
    c.audit.replaceChildren(...auditLog(semaphore.audit || []));
    return c.root;
  }

  window.RTS.card = card;
  window.RTS.forgetCards = (keep) => {
    for (const name of cards.keys()) if (!keep.has(name)) cards.delete(name);
  };
})();
