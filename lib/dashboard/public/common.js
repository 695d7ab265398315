// What the dashboard's scripts share (window.RTS): DOM helpers that only ever set textContent (never
// innerHTML, so names, tokens and owner labels, which are user data, cannot become markup),
// durations, the bearer token, and the API calls.
'use strict';
(function () {
  const body = document.body;
  const base = body.dataset.base || '';
  const readOnly = body.dataset.readOnly === 'true';
  const message = document.getElementById('message');

  // The bearer token: from the URL fragment (#token=…, never sent to the server), kept for the tab.
  const fromHash = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (fromHash) {
    sessionStorage.setItem('rts-token', decodeURIComponent(fromHash[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }

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

  function button(className, text, type) {
    const node = el('button', className, text);
    node.type = type || 'button';
    return node;
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

  // A lease as a short text: "expired 8.7 s ago", "ends in 20.0 s", or null for none.
  function lease(leaseLeftMs) {
    if (leaseLeftMs === null || leaseLeftMs === undefined) return null;
    return leaseLeftMs < 0 ? 'expired ' + duration(-leaseLeftMs) + ' ago' : 'ends in ' + duration(leaseLeftMs);
  }

  // The time of day of an ISO 8601 timestamp, UTC, as the page says: "12:03:26.498".
  function utc(iso, withMs) {
    return iso ? iso.slice(11, withMs ? 23 : 19) : '?';
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

  async function getJson(url) {
    const response = await fetch(url, { cache: 'no-store' });
    const result = await response.json().catch(() => ({}));
    return { status: response.status, ok: response.ok, result };
  }

  function renderAuth() {
    const auth = document.getElementById('auth');
    if (readOnly) {
      auth.replaceChildren(el('span', 'badge', 'read-only'));
      return;
    }
    const token = sessionStorage.getItem('rts-token');
    if (token) {
      const forget = button('link', 'forget token');
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
    const form = inputForm('token-form', [input, button('', 'use token', 'submit')], () => {
      if (input.value) sessionStorage.setItem('rts-token', input.value);
      renderAuth();
    });
    auth.replaceChildren(form);
  }

  // POSTs a change; says what came of it; resolves whether it was done.
  async function post(name, verb, payload) {
    const token = sessionStorage.getItem('rts-token');
    if (!token) {
      say('Enter the bearer token first (top right).', true);
      return false;
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
        return false;
      }
      if (verb === 'release') say('Released token "' + payload.token + '" of "' + name + '".', false);
      else
        say(
          'Released ' + result.released + ' stale token' + (result.released === 1 ? '' : 's') + ' of "' + name + '".',
          false,
        );
      return true;
    } catch (error) {
      say('Request failed: ' + error.message, true);
      return false;
    }
  }

  window.RTS = {
    base,
    readOnly,
    refreshMs: Number(body.dataset.refreshMs) || 1000,
    single: body.dataset.semaphore === undefined ? null : body.dataset.semaphore,
    ARM_MS: 4000,
    el,
    field,
    button,
    inputForm,
    duration,
    lease,
    utc,
    say,
    semaphoreUrl,
    apiUrl,
    getJson,
    renderAuth,
    post,
  };
})();
