// A fake nvidia-cuda-mps-control for the agent's MPS tests (the real one is part of the driver).
// It behaves as the real control program does from the outside and records what it was told:
//   fake_mps_control -d     start the control daemon in the background, on the control socket
//                           $CUDA_MPS_PIPE_DIRECTORY/control (default /tmp/nvidia-mps); its log
//                           $CUDA_MPS_LOG_DIRECTORY/control.log (default /var/log/nvidia-mps)
//                           records its environment and every command; a marker file in
//                           /dev/shm tells which /dev/shm it saw
//   fake_mps_control        client mode: sends each line of stdin to the daemon, prints answers
// Commands: set_default_active_thread_percentage P, get_default_active_thread_percentage,
// set_default_device_pinned_mem_limit DEV LIMIT, get_default_device_pinned_mem_limit DEV,
// get_server_list, quit. Anything else: "Invalid command" and exit status 1.
//   fake_mps_control --as-nvidia-smi ARGS...   appends ARGS to $FAKE_SMI_LOG (compute mode calls)
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

namespace {

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : fallback;
}

std::string SocketPath() { return Env("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps") + "/control"; }
std::string LogPath() {
  return Env("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps") + "/control.log";
}

int Connect() {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", SocketPath().c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void Log(const std::string& line) {
  FILE* f = std::fopen(LogPath().c_str(), "a");
  if (f == nullptr) return;
  std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
}

std::string Handle(const std::string& line, bool* quit, bool* bad) {
  static double default_atp = 100.0;
  static std::map<std::string, std::string> pinned;
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  Log("command: " + line);
  if (cmd == "set_default_active_thread_percentage") {
    double p = -1;
    in >> p;
    if (p <= 0 || p > 100) {
      *bad = true;
      return "Invalid percentage";
    }
    default_atp = p;
    return "";
  }
  if (cmd == "get_default_active_thread_percentage") {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", default_atp);
    return buf;
  }
  if (cmd == "set_default_device_pinned_mem_limit") {
    std::string dev, value;
    in >> dev >> value;
    if (dev.empty() || value.empty()) {
      *bad = true;
      return "Invalid arguments";
    }
    pinned[dev] = value;
    return "";
  }
  if (cmd == "get_default_device_pinned_mem_limit") {
    std::string dev;
    in >> dev;
    return pinned.count(dev) ? pinned[dev] : "0";
  }
  if (cmd == "get_server_list") return "";
  if (cmd == "quit") {
    *quit = true;
    return "";
  }
  *bad = true;
  return "Invalid command";
}

int Daemon() {
  if (int fd = Connect(); fd >= 0) {
    ::close(fd);
    std::fprintf(stderr, "An instance of this daemon is already running\n");
    return 1;
  }
  pid_t pid = ::fork();
  if (pid < 0) return 1;
  if (pid > 0) return 0;  // the real one daemonises too: -d returns at once
  ::setsid();
  ::signal(SIGPIPE, SIG_IGN);
  // A daemon: no stdio of its starter's.
  int null = ::open("/dev/null", O_RDWR);
  ::dup2(null, 0);
  ::dup2(null, 1);
  ::dup2(null, 2);
  const std::string path = SocketPath();
  ::unlink(path.c_str());
  int srv = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (::bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(srv, 16) != 0) {
    Log("cannot listen on " + path);
    ::_exit(1);
  }
  const std::string marker = "/dev/shm/tessera-fake-mps-" + std::to_string(::getpid());
  if (FILE* f = std::fopen(marker.c_str(), "w")) std::fclose(f);
  Log("started pid " + std::to_string(::getpid()));
  Log("env CUDA_VISIBLE_DEVICES=" + Env("CUDA_VISIBLE_DEVICES", ""));
  Log("env CUDA_MPS_PIPE_DIRECTORY=" + Env("CUDA_MPS_PIPE_DIRECTORY", ""));
  Log("env CUDA_MPS_LOG_DIRECTORY=" + Env("CUDA_MPS_LOG_DIRECTORY", ""));
  Log("shm marker " + marker);
  for (;;) {
    int c = ::accept4(srv, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::string line;
    char ch;
    while (::read(c, &ch, 1) == 1 && ch != '\n') line += ch;
    bool quit = false, bad = false;
    std::string answer = Handle(line, &quit, &bad);
    std::string out = (bad ? "E " : "O ") + answer + "\n";
    ssize_t ignored = ::write(c, out.data(), out.size());
    (void)ignored;
    ::close(c);
    if (quit) {
      Log("quit");
      ::unlink(path.c_str());
      ::unlink(marker.c_str());
      ::_exit(0);
    }
  }
}

int Client() {
  std::string line;
  int status = 0;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    int fd = Connect();
    if (fd < 0) {
      std::fprintf(stderr, "Cannot find MPS control daemon process\n");
      return 1;
    }
    line += '\n';
    ssize_t ignored = ::write(fd, line.data(), line.size());
    (void)ignored;
    std::string answer;
    char buf[256];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
      answer.append(buf, static_cast<size_t>(n));
    ::close(fd);
    if (answer.size() >= 2) {
      if (answer[0] == 'E') status = 1;
      std::string text = answer.substr(2);
      if (text != "\n") std::fputs(text.c_str(), answer[0] == 'E' ? stderr : stdout);
    }
  }
  return status;
}

int Smi(int argc, char** argv) {
  FILE* f = std::fopen(Env("FAKE_SMI_LOG", "/dev/null").c_str(), "a");
  if (f == nullptr) return 1;
  for (int i = 2; i < argc; ++i) std::fprintf(f, "%s%s", i > 2 ? " " : "", argv[i]);
  std::fprintf(f, "\n");
  std::fclose(f);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--as-nvidia-smi") == 0) return Smi(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "-d") == 0) return Daemon();
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s [-d]\n", argv[0]);
    return 2;
  }
  return Client();
}
