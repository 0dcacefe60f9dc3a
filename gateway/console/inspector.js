// The raw event inspector: each event's JSON under its sequence and type, oldest first. The page
// keeps the newest MAX_SHOWN entries; an entry's JSON is laid out when it is first opened.

import { h, pretty } from './dom.js';

const MAX_SHOWN = 1000;

export class EventInspector {
  #list;
  #summary;
  #count = 0;
  #last = 0;

  /** @param {HTMLElement} list an <ol> @param {HTMLElement} summary where the counts go */
  constructor(list, summary) {
    this.#list = list;
    this.#summary = summary;
  }

  reset() {
    this.#list.replaceChildren();
    this.#count = 0;
    this.#last = 0;
    this.#update();
  }

  /** A line that is not an event (e.g. where a transcript took over). */
  note(text) {
    this.#list.append(h('li', { class: 'inspector-note', text }));
  }

  add(event) {
    const kind = event.type === 'session.stream' ? `${event.type} · ${event.data.type}` : event.type;
    const json = h('pre');
    const entry = h(
      'details',
      {
        ontoggle: () => {
          if (entry.open && json.textContent === '') json.textContent = pretty(event);
        },
      },
      h('summary', {}, h('span', { class: 'sequence', text: `#${event.sequence}` }), ` ${kind}`),
      json,
    );
    this.#list.append(h('li', {}, entry));
    while (this.#list.childElementCount > MAX_SHOWN) this.#list.firstElementChild.remove();
    this.#count += 1;
    this.#last = event.sequence;
    this.#update();
  }

  #update() {
    this.#summary.textContent = this.#count === 0 ? 'none yet' : `${this.#count}, last #${this.#last}`;
  }
}
