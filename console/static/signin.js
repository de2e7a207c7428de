// Sign in: the key is checked with GET /v1/me, which also says what its
// role may do; only then is it kept, in this tab's sessionStorage.
'use strict';

V.start(() => {
  const why = { refused: 'The API refused the key (401): sign in again.' }[V.param('why')];
  if (why) V.say('signin-status', why, 'error');
  document.getElementById('signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = document.getElementById('key').value.trim();
    if (!key) return;
    V.say('signin-status', 'Checking the key…');
    const res = await V.api('GET', '/v1/me', { key });
    if (!res.ok) {
      V.say('signin-status', res.status === 401 ? 'That key is not known to this service.' : V.problemText(res), 'error');
      return;
    }
    V.signIn(key, res.data);
    // Only a page of the console (next never leads elsewhere), and one the
    // key's role may use: the first of them when it may not use next.
    const needs = { '': 'metrics:read', rules: 'rules:read', backtest: 'rules:test', decisions: 'decisions:read', entities: 'entities:read' };
    let next = V.param('next') || '';
    if (!(next in needs) || !V.can(needs[next])) next = Object.keys(needs).find((p) => V.can(needs[p])) || '';
    location.replace(next || './');
  });
});
