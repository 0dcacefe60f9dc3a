// The web console: sign in with a token; list, create, resume, fork and close sessions; chat with
// streamed output, tool activity and approval prompts; abort; a live indicator; the raw events.
// Everything goes through the product's browser client (agent-client.js). The token is kept in
// sessionStorage only (a reload keeps you signed in, closing the tab or signing out forgets it)
// and never appears in a URL or a log. The open session is in the URL hash (#session=ID).

import { AgentClient } from './agent-client.js';
import { Conversation, contentText } from './conversation.js';
import { byId, describeError, h } from './dom.js';
import { followSession } from './follow.js';
import { EventInspector } from './inspector.js';

const TOKEN_KEY = 'agent-runtime-console.token';
const CLIENT_INFO = { name: 'agent-console', version: '0.1.0', title: 'agent-runtime console' };
const PAGE_SIZE = 50;
const INPUT_REFRESH_DELAY_MS = 300;
const NARROW = window.matchMedia('(max-width: 720px)');
const API_BASE = document.querySelector('meta[name="agent-runtime-api-base"]')?.getAttribute('content') ?? '/v1/agent';

const ui = {
  connection: byId('connection'),
  signOut: byId('sign-out'),
  error: byId('error'),
  errorText: byId('error-text'),
  errorDismiss: byId('error-dismiss'),
  announcer: byId('announcer'),
  signIn: byId('sign-in'),
  signInForm: byId('sign-in-form'),
  token: byId('token'),
  workspace: byId('workspace'),
  sessions: byId('sessions'),
  sessionsToggle: byId('sessions-toggle'),
  createForm: byId('create-form'),
  newTitle: byId('new-title'),
  sessionList: byId('session-list'),
  refresh: byId('refresh-sessions'),
  more: byId('more-sessions'),
  chatTitle: byId('chat-title'),
  chatMeta: byId('chat-meta'),
  fork: byId('fork'),
  close: byId('close'),
  conversation: byId('conversation'),
  composer: byId('composer'),
  input: byId('composer-input'),
  priority: byId('priority'),
  send: byId('send'),
  abort: byId('abort'),
};

const state = {
  client: null,
  sessions: new Map(), // sessionId -> descriptor, in list order
  nextCursor: undefined,
  current: null, // { sessionId, descriptor, controller }
  busy: false, // a command of the composer or the header is in flight
  inputRefresh: null,
};

const conversation = new Conversation(ui.conversation, {
  onDecision: (permissionRequestId, decision) =>
    state.client.resolvePermission(state.current.sessionId, permissionRequestId, decision),
  onUnknownInput: scheduleInputRefresh,
  onApproval: (approval) => announce(`Approval needed: ${approval.element.querySelector('h3').textContent}`),
});
const inspector = new EventInspector(byId('event-list'), byId('event-count'));

// ---- status, errors, announcements ----

function setConnection(stateName, text) {
  ui.connection.dataset.state = stateName;
  ui.connection.textContent = text;
}

function showError(error) {
  if (error === null) {
    ui.error.hidden = true;
    ui.errorText.textContent = '';
    return;
  }
  ui.errorText.textContent = typeof error === 'string' ? error : describeError(error);
  ui.error.hidden = false;
}

function announce(text) {
  ui.announcer.textContent = '';
  setTimeout(() => {
    ui.announcer.textContent = text;
  }, 50);
}

/** A refused token ends the sign-in; returns whether `error` was that. */
function signedOutBy(error) {
  if (error?.code !== 'UNAUTHENTICATED') return false;
  signOut('The server refused the token. Sign in again.');
  return true;
}

function fail(error) {
  if (!signedOutBy(error)) showError(error);
}

// ---- signing in and out ----

async function signIn(token, remembered) {
  const client = new AgentClient({
    baseUrl: `${location.origin}${API_BASE}`,
    client: CLIENT_INFO,
    headers: () => ({ authorization: `Bearer ${token}` }),
  });
  setConnection('connecting', 'Signing in…');
  let page;
  try {
    await client.initialize();
    page = await client.listSessions({ limit: PAGE_SIZE });
  } catch (error) {
    if (remembered) sessionStorage.removeItem(TOKEN_KEY);
    setConnection('idle', 'Signed out');
    showSignIn();
    showError(error?.code === 'UNAUTHENTICATED' ? 'The server refused this token.' : error);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  state.client = client;
  ui.token.value = '';
  ui.signIn.hidden = true;
  ui.workspace.hidden = false;
  ui.signOut.hidden = false;
  showError(null);
  setConnection('idle', 'Signed in');
  state.sessions.clear();
  addSessions(page);
  const sessionId = sessionFromHash();
  if (sessionId) openSession(sessionId);
}

function showSignIn() {
  ui.workspace.hidden = true;
  ui.signOut.hidden = true;
  ui.signIn.hidden = false;
  ui.token.focus();
}

function signOut(message) {
  closeCurrent();
  sessionStorage.removeItem(TOKEN_KEY);
  // Titles are what the user typed: forgotten with the token.
  sessionStorage.removeItem(TITLES_KEY);
  titles.clear();
  state.client = null;
  state.sessions.clear();
  ui.sessionList.replaceChildren();
  history.replaceState(null, '', `${location.pathname}${location.search}`);
  setConnection('idle', 'Signed out');
  showSignIn();
  showError(message ?? null);
}

// ---- the session list ----

// A session without a title in its metadata is titled by its first input, remembered for this
// tab like the token (sessionStorage: inputs are what users typed, kept no longer than that).
const TITLES_KEY = 'agent-runtime-console:titles';
const MAX_TITLES = 500;
const titles = new Map(Object.entries(JSON.parse(sessionStorage.getItem(TITLES_KEY) ?? '{}')));

function rememberTitle(sessionId, text) {
  const title = (text ?? '').replace(/\s+/g, ' ').trim().slice(0, 80);
  if (!title || titles.has(sessionId)) return;
  titles.set(sessionId, title);
  while (titles.size > MAX_TITLES) titles.delete(titles.keys().next().value);
  sessionStorage.setItem(TITLES_KEY, JSON.stringify(Object.fromEntries(titles)));
  renderSessions();
  renderHeader();
}

const formatTime = (iso) => {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
};

const sessionTitle = (descriptor) => {
  const title = descriptor?.metadata?.title;
  if (typeof title === 'string' && title.trim()) return title;
  return titles.get(descriptor?.sessionId) ?? `Untitled session, ${formatTime(descriptor?.createdAt)}`;
};

function addSessions(page) {
  for (const descriptor of page.sessions) state.sessions.set(descriptor.sessionId, descriptor);
  state.nextCursor = page.nextCursor;
  renderSessions();
}

/** Puts (or refreshes) one session at the top of the list. */
function upsertSession(descriptor) {
  const rest = [...state.sessions].filter(([id]) => id !== descriptor.sessionId);
  state.sessions = new Map([[descriptor.sessionId, descriptor], ...rest]);
  renderSessions();
}

function renderSessions() {
  const currentId = state.current?.sessionId;
  const items = [...state.sessions.values()].map((descriptor) =>
    h(
      'li',
      {},
      h(
        'a',
        {
          class: 'session-link',
          href: `#session=${encodeURIComponent(descriptor.sessionId)}`,
          'aria-current': descriptor.sessionId === currentId ? 'page' : undefined,
          dataset: { status: descriptor.status },
        },
        h('span', { class: 'session-title', text: sessionTitle(descriptor) }),
        h('span', { class: 'session-meta', text: `${descriptor.status} · ${formatTime(descriptor.updatedAt)}` }),
      ),
    ),
  );
  if (items.length === 0) items.push(h('li', { class: 'empty', text: 'No sessions yet.' }));
  ui.sessionList.replaceChildren(...items);
  ui.more.hidden = state.nextCursor === undefined;
}

async function refreshSessions(more) {
  try {
    const page = await state.client.listSessions({ limit: PAGE_SIZE, cursor: more ? state.nextCursor : undefined });
    if (!more) state.sessions.clear();
    addSessions(page);
  } catch (error) {
    fail(error);
  }
}

function setSessionsCollapsed(collapsed) {
  if (collapsed) ui.sessions.dataset.collapsed = '';
  else delete ui.sessions.dataset.collapsed;
  ui.sessionsToggle.setAttribute('aria-expanded', String(!collapsed));
}

// ---- the open session ----

function sessionFromHash() {
  return new URLSearchParams(location.hash.slice(1)).get('session') || null;
}

function closeCurrent() {
  state.current?.controller.abort();
  state.current = null;
  clearTimeout(state.inputRefresh);
  conversation.reset();
  inspector.reset();
  ui.conversation.replaceChildren(h('p', { class: 'empty', text: 'Choose a session, or create one.' }));
  renderHeader();
  updateControls();
}

function renderHeader() {
  const current = state.current;
  if (!current) {
    ui.chatTitle.textContent = 'No session selected';
    ui.chatMeta.textContent = '';
    return;
  }
  const descriptor = current.descriptor;
  ui.chatTitle.textContent = descriptor ? sessionTitle(descriptor) : `Session ${current.sessionId}`;
  ui.chatMeta.textContent = descriptor
    ? `${descriptor.status} · created ${formatTime(descriptor.createdAt)} · ${descriptor.sessionId}`
    : current.sessionId;
}

/** Whether the reader is at the end of `element` (so new text should keep it there). */
const nearBottom = (element) => element.scrollHeight - element.scrollTop - element.clientHeight < 48;

function updateControls() {
  const current = state.current;
  const open = current !== null && !conversation.closed && current.descriptor?.status === 'active';
  const running = conversation.runningRequestId !== undefined;
  ui.input.disabled = !open;
  ui.send.disabled = !open || state.busy;
  ui.priority.disabled = !open || !running;
  ui.abort.hidden = !(open && running);
  ui.fork.disabled = current === null || state.busy;
  ui.close.disabled = !open || state.busy;
}

async function openSession(sessionId) {
  closeCurrent();
  conversation.reset();
  const controller = new AbortController();
  const current = { sessionId, descriptor: state.sessions.get(sessionId) ?? null, controller };
  state.current = current;
  const { signal } = controller;
  renderSessions();
  renderHeader();
  if (NARROW.matches) setSessionsCollapsed(true);
  setConnection('connecting', 'Opening…');
  let snapshot;
  try {
    snapshot = await state.client.readSession(sessionId, { signal });
  } catch (error) {
    if (signal.aborted) return;
    setConnection('failed', 'Not connected');
    fail(error);
    return;
  }
  if (snapshot.session?.status === 'active' && snapshot.loaded === false) {
    // Resuming loads the session into an executor, with its transcript and approvals.
    try {
      await state.client.resumeSession(sessionId, { signal });
      snapshot = await state.client.readSession(sessionId, { signal });
    } catch (error) {
      if (signal.aborted) return;
      fail(error);
    }
  }
  current.descriptor = snapshot.session;
  const firstInput = snapshot.messages.find((message) => message.role === 'user');
  if (firstInput) rememberTitle(sessionId, contentText(firstInput.content));
  // The transcript first: a request that shows up in the events is rebuilt from them in place,
  // and one that never does (a fork's copied history) stays as the transcript tells it.
  conversation.showTranscript(snapshot.messages);
  ui.conversation.scrollTop = ui.conversation.scrollHeight;
  renderHeader();
  updateControls();
  follow(current);
}

function follow(current) {
  const { sessionId, controller } = current;
  const { signal } = controller;
  const onEvent = (event) => {
    inspector.add(event);
    const following = nearBottom(ui.conversation);
    conversation.apply(event);
    if (following) ui.conversation.scrollTop = ui.conversation.scrollHeight;
    if (event.type === 'session.closed' && current.descriptor) {
      current.descriptor = { ...current.descriptor, status: 'closed' };
      renderHeader();
      upsertSession(current.descriptor);
    }
    updateControls();
  };
  const onSnapshot = (snapshot) => {
    conversation.reset();
    inspector.reset();
    const from = snapshot.recovery?.lastEventSequence ?? 0;
    inspector.note(`Older events are no longer kept: the saved transcript is shown, then the events after #${from}.`);
    conversation.showTranscript(snapshot.messages);
    ui.conversation.scrollTop = ui.conversation.scrollHeight;
    current.descriptor = snapshot.session ?? current.descriptor;
    renderHeader();
    updateControls();
  };
  const onStatus = ({ state: connection, after, attempt }) => {
    if (connection === 'connecting') setConnection('connecting', 'Connecting…');
    else if (connection === 'live') setConnection('live', after > 0 ? `Live · resumed after #${after}` : 'Live');
    else if (connection === 'reconnecting') setConnection('reconnecting', `Reconnecting… (attempt ${attempt}, from #${after})`);
    else if (connection === 'closed') setConnection('closed', 'Session closed');
  };
  followSession(state.client, sessionId, { signal, onEvent, onSnapshot, onStatus }).catch((error) => {
    if (signal.aborted) return;
    setConnection('failed', 'Disconnected');
    fail(error);
  });
}

/** Input text is not in the event log: learn it from the transcript when a request is new here. */
function scheduleInputRefresh() {
  const current = state.current;
  clearTimeout(state.inputRefresh);
  state.inputRefresh = setTimeout(async () => {
    if (state.current !== current) return;
    try {
      const snapshot = await state.client.readSession(current.sessionId, { signal: current.controller.signal });
      if (state.current !== current) return;
      conversation.learnInputs(snapshot.messages);
      conversation.markUnknownInputs();
    } catch (error) {
      if (!current.controller.signal.aborted) fail(error);
    }
  }, INPUT_REFRESH_DELAY_MS);
}

/** Runs a command for the open session with the controls disabled meanwhile. */
async function command(action) {
  const current = state.current;
  if (!current || state.busy) return;
  state.busy = true;
  updateControls();
  showError(null);
  try {
    await action(current);
  } catch (error) {
    fail(error);
  } finally {
    state.busy = false;
    updateControls();
  }
}

function sendInput() {
  const text = ui.input.value;
  if (!text.trim()) return;
  return command(async (current) => {
    const running = conversation.runningRequestId !== undefined;
    const options = running ? { priority: ui.priority.value } : {};
    const result = await state.client.submitInput(current.sessionId, text, options);
    rememberTitle(current.sessionId, text);
    const requestId = result.status === 'started' ? result.requestId : undefined;
    if (state.current !== current) return;
    conversation.knowInput({ inputId: result.inputId, requestId, text });
    ui.input.value = '';
    if (result.status === 'queued') announce('Queued: it runs when the current request ends.');
  });
}

// ---- wiring ----

ui.signInForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const token = ui.token.value.trim();
  if (token) signIn(token, false);
});

ui.signOut.addEventListener('click', () => signOut());
ui.errorDismiss.addEventListener('click', () => showError(null));

ui.sessionsToggle.addEventListener('click', () => setSessionsCollapsed(ui.sessions.dataset.collapsed === undefined));
NARROW.addEventListener('change', () => {
  if (!NARROW.matches) setSessionsCollapsed(false);
  // The conversation scrolls by itself only on wide screens: show its end there.
  ui.conversation.scrollTop = ui.conversation.scrollHeight;
});

ui.createForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  const title = ui.newTitle.value.trim();
  try {
    const session = await state.client.createSession(title ? { title } : undefined);
    ui.newTitle.value = '';
    upsertSession(session.session);
    location.hash = `session=${encodeURIComponent(session.sessionId)}`;
  } catch (error) {
    fail(error);
  }
});

ui.refresh.addEventListener('click', () => refreshSessions(false));
ui.more.addEventListener('click', () => refreshSessions(true));

ui.fork.addEventListener('click', () =>
  command(async (current) => {
    const source = current.descriptor;
    const metadata = { ...(source?.metadata ?? {}), title: `${sessionTitle(source)} (fork)` };
    const forked = await state.client.forkSession(current.sessionId, { metadata });
    upsertSession(forked.session);
    location.hash = `session=${encodeURIComponent(forked.sessionId)}`;
  }),
);

ui.close.addEventListener('click', () => {
  if (!window.confirm('Close this session? It cannot be resumed afterwards.')) return;
  command(async (current) => {
    const descriptor = await state.client.closeSession(current.sessionId);
    current.descriptor = descriptor;
    upsertSession(descriptor);
    renderHeader();
  });
});

ui.abort.addEventListener('click', () =>
  command(async (current) => {
    await state.client.abortRequest(current.sessionId);
  }),
);

ui.composer.addEventListener('submit', (event) => {
  event.preventDefault();
  sendInput();
});

ui.input.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});

window.addEventListener('hashchange', () => {
  if (!state.client) return;
  const sessionId = sessionFromHash();
  if (sessionId === null) closeCurrent();
  else if (sessionId !== state.current?.sessionId) openSession(sessionId);
});

const remembered = sessionStorage.getItem(TOKEN_KEY);
if (remembered) signIn(remembered, true);
else showSignIn();
