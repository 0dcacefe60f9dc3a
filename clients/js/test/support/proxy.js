// An HTTP proxy in front of the real server that can lose a command's response after the server
// handled it, or cut an event stream mid-flight: the failures a client must survive.

import http from 'node:http';

export async function startProxy(upstream) {
  const target = new URL(upstream);
  const state = {
    /** Command types whose next response is dropped (the server still handles the command). */
    dropResponseOf: new Set(),
    /** After this many bytes of the next event stream, the connection is cut. */
    cutStreamAfterBytes: undefined,
    commands: [],
    streams: [],
    /** Event-stream connections currently open between a client and this proxy. */
    openStreams: 0,
  };
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks);
      let command;
      if (request.method === 'POST' && request.url.endsWith('/commands')) {
        command = JSON.parse(body.toString('utf8'));
        state.commands.push({ commandId: command.commandId, type: command.type });
      } else {
        state.streams.push({ url: request.url, lastEventId: request.headers['last-event-id'] });
        state.openStreams += 1;
        response.on('close', () => {
          state.openStreams -= 1;
        });
      }
      const forwarded = http.request(
        { host: target.hostname, port: target.port, path: request.url, method: request.method, headers: request.headers },
        (upstreamResponse) => relay(command, upstreamResponse),
      );
      forwarded.on('error', () => response.destroy());
      forwarded.end(body);

      function relay(command, upstreamResponse) {
        if (command && state.dropResponseOf.delete(command.type)) {
          // Read the whole answer (the command completed), then vanish without answering.
          upstreamResponse.resume();
          upstreamResponse.on('end', () => request.socket.destroy());
          return;
        }
        response.writeHead(upstreamResponse.statusCode, upstreamResponse.headers);
        const cutAfter = command ? undefined : state.cutStreamAfterBytes;
        if (cutAfter === undefined) {
          upstreamResponse.pipe(response);
          return;
        }
        state.cutStreamAfterBytes = undefined;
        let sent = 0;
        upstreamResponse.on('data', (chunk) => {
          if (sent >= cutAfter) return;
          const part = chunk.subarray(0, cutAfter - sent);
          sent += part.length;
          if (sent < cutAfter) {
            response.write(part);
            return;
          }
          // Cut in the middle of the HTTP body (most likely mid-frame), after the bytes before
          // the cut reached the client: it must resume from the last complete event.
          upstreamResponse.destroy();
          response.write(part, () => request.socket.end());
        });
        upstreamResponse.on('end', () => response.end());
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    state,
    baseUrl: `http://127.0.0.1:${port}${target.pathname}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}
