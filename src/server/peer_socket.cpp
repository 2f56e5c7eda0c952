// peer_socket.cpp — a request's socket by its address pair, and a non-blocking test of
// whether its client has closed it (peer_socket.h).
#include "server/peer_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace lacuna::server {

namespace {

// The numeric host and port of an address (getnameinfo, as cpp-httplib writes them).
bool host_port(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  host = h;
  port = std::atoi(p);
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string host;
  int port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      !host_port(a, len, host, port) || port != local_port || host != local_addr) {
    return false;
  }
  len = sizeof a;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
         host_port(a, len, host, port) && port == remote_port && host == remote_addr;
}

// Calls fn(fd) for each descriptor this process has open (/proc/self/fd) until it returns
// false.
template <typename Fn>
void for_each_fd(Fn fn) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own && !fn(fd)) break;
  }
  closedir(dir);
}

}  // namespace

int find_peer_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return -1;
  int found = -1;
  for_each_fd([&](int fd) {
    if (!matches(fd, local_addr, local_port, remote_addr, remote_port)) return true;
    found = fd;
    return false;
  });
  return found;
}

int widen_listen_backlog(int port, int backlog) {
  if (port <= 0) return 0;
  int changed = 0;
  for_each_fd([&](int fd) {
    int listening = 0;
    socklen_t n = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n) != 0 || listening == 0) {
      return true;
    }
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    std::string host;
    int p = 0;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && host_port(a, len, host, p) &&
        p == port && listen(fd, backlog) == 0) {
      ++changed;
    }
    return true;
  });
  return changed;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  const int n = poll(&p, 1, 0);
  if (n == 0) return false;  // nothing to read: the connection is idle and open
  if (n < 0) return errno != EINTR && errno != EAGAIN;
  if ((p.revents & POLLNVAL) != 0) return true;
  char c;
  const ssize_t got = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got > 0) return false;  // bytes of a next request: still there
  if (got == 0) return true;  // end of file: the client closed
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace lacuna::server
