// peer_socket.h — the socket of a request's connection, found by its address pair, and
// whether the client has closed it: how a non-streamed request notices a client that went
// away (cpp-httplib 0.11 hands a handler neither the socket nor a "connection closed" test).
#pragma once

#include <string>

namespace lacuna::server {

// The descriptor of this process's TCP socket whose local and peer addresses are the given
// ones (numeric host text as getnameinfo writes it, and ports); -1 when there is none. A
// connection's 4-tuple is unique, so the match is the request's own socket, which stays
// open while its handler runs.
int find_peer_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port);

// True when the peer has closed the connection or it failed: the socket reads end of file
// or an error (a peek, nothing consumed). Pending bytes (a pipelined request) are not a
// close. Never blocks.
bool peer_closed(int fd);

// Raises the backlog of this process's listening TCP socket(s) on `port` to `backlog`
// (listen() again on a listening socket only resizes its queue). cpp-httplib 0.11 listens
// with a backlog of 5, built into Debian's shared library: 64 clients connecting at once
// overflow it, and a client whose handshake the kernel then drops sees its connection fail.
// Returns how many sockets it changed.
int widen_listen_backlog(int port, int backlog);

}  // namespace lacuna::server
