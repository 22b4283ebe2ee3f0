/** The web console (docs/http-api.md, "Console"): a hash-routed Preact app over the admin API. */
import { html } from 'htm/preact';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { get, onUnauthorized, signIn, signOut, signedInAs } from './api.js';
import { Group, Groups } from './groups.js';
import { Overview } from './overview.js';
import { Tail } from './tail.js';
import { Topic, Topics } from './topics.js';
import { ErrorBox } from './widgets.js';

function useRoute(): string {
  const [route, setRoute] = useState(location.hash.slice(1) || '/');
  useEffect(() => {
    const on = () => setRoute(location.hash.slice(1) || '/');
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}

interface Session {
  authentication: boolean;
  principal: string | null;
  authenticated: boolean;
}

function SignIn({ onDone }: { onDone: () => void }) {
  const [principal, setPrincipal] = useState('');
  const [token, setToken] = useState('');
  const [refused, setRefused] = useState(false);
  const [failed, setFailed] = useState<Error | undefined>(undefined);
  const submit = async (e: Event) => {
    e.preventDefault();
    signIn(principal, token);
    // Checked before any page loads, so wrong credentials are told here, not as failed requests.
    let s: Session;
    try {
      s = await get<Session>('/session');
    } catch (err) {
      // Not known to be right or wrong: nothing is kept, the form stays filled in to try again.
      signOut();
      setRefused(false);
      setFailed(err as Error);
      return;
    }
    setFailed(undefined);
    if (s.authenticated) onDone();
    else {
      signOut();
      setToken('');
      setRefused(true);
    }
  };
  return html`
    <form class="signin" onSubmit=${submit} data-test="signin">
      <h1>Sign in</h1>
      <p class="muted">This broker requires authentication. The token stays in this tab only.</p>
      <label>principal <input name="principal" autocomplete="username" value=${principal} onInput=${(e: Event) => setPrincipal((e.target as HTMLInputElement).value)} required /></label>
      <label>token <input name="token" type="password" autocomplete="current-password" value=${token} onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} required /></label>
      <button>Sign in</button>
      ${refused && html`<div class="error" role="alert" data-test="signin-refused">wrong principal or token</div>`}
      ${failed && html`<div data-test="signin-failed"><${ErrorBox} error=${failed} prefix="could not sign in: " /></div>`}
    </form>`;
}

/** A route segment decoded; a malformed escape (`%zz`) leaves it as typed rather than blank the page. */
function decodeSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function page(route: string) {
  const parts = route.split('/').filter(Boolean).map(decodeSegment);
  if (parts.length === 0) return html`<${Overview} />`;
  if (parts[0] === 'topics' && parts.length === 1) return html`<${Topics} />`;
  if (parts[0] === 'topics' && parts.length === 2) return html`<${Topic} key=${parts[1]} topic=${parts[1]!} />`;
  if (parts[0] === 'topics' && parts[2] === 'tail') return html`<${Tail} key=${parts[1]} topic=${parts[1]!} />`;
  if (parts[0] === 'groups' && parts.length === 1) return html`<${Groups} />`;
  if (parts[0] === 'groups' && parts.length === 2) return html`<${Group} key=${parts[1]} group=${parts[1]!} />`;
  return html`<p>No such page. <a href="#/">Overview</a></p>`;
}

function App() {
  const route = useRoute();
  const [needsAuth, setNeedsAuth] = useState<boolean | undefined>(undefined);
  const [epoch, setEpoch] = useState(0);
  // Why the first question, whether to sign in, went unanswered (shown with a retry).
  const [sessionError, setSessionError] = useState<Error | undefined>(undefined);
  const [attempt, setAttempt] = useState(0);
  useEffect(() => onUnauthorized(() => setNeedsAuth(true)), []);
  useEffect(() => {
    get<Session>('/session').then(
      (s) => (setSessionError(undefined), setNeedsAuth(s.authentication && !s.authenticated)),
      (err: Error) => setSessionError(err),
    );
  }, [attempt]);
  const user = signedInAs();
  const nav = (href: string, label: string, prefix: string) =>
    html`<a href=${href} class=${(prefix === '/' ? route === '/' : route.startsWith(prefix)) ? 'on' : ''}>${label}</a>`;
  return html`
    <header>
      <span class="brand">Tributary</span>
      <nav>${nav('#/', 'Overview', '/')} ${nav('#/topics', 'Topics', '/topics')} ${nav('#/groups', 'Groups', '/groups')}</nav>
      <span class="user">${user ? html`${user} <button class="link" onClick=${() => (signOut(), setNeedsAuth(true))}>sign out</button>` : ''}</span>
    </header>
    <main key=${epoch}>
      ${
        needsAuth === undefined && sessionError
          ? html`<div data-test="session-error"><${ErrorBox} error=${sessionError} prefix="could not reach the console's API: " /><button onClick=${() => setAttempt((a) => a + 1)}>Retry</button></div>`
          : ''
      }
      ${needsAuth === undefined ? '' : needsAuth ? html`<${SignIn} onDone=${() => (setNeedsAuth(false), setEpoch((e) => e + 1))} />` : page(route)}
    </main>`;
}

render(html`<${App} />`, document.getElementById('app')!);
