// The launch adapter of the threads backend: the per-rank BackendImpl that <dist/dist.hpp>'s free
// functions call, the Work handles of isend/irecv/all_reduce_async, and launch_threads(), which
// runs one thread per rank and rethrows the first rank's error.
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "threads/engine.hpp"

namespace dist::detail {
namespace threads {
namespace {

class P2PWork final : public WorkImpl {
 public:
  P2PWork(Engine* e, int r, std::shared_ptr<P2POp> op, std::shared_ptr<const GroupInfo> g)
      : e_(e), r_(r), op_(std::move(op)), g_(std::move(g)) {}
  bool is_completed() override { return e_->p2p_completed(r_, op_); }
  void wait() override { e_->wait_p2p(r_, op_); }
  int source_rank() override {
    if (!op_->any_source) return WorkImpl::source_rank();
    e_->wait_p2p(r_, op_);
    return g_ ? g_->group_of[static_cast<std::size_t>(op_->peer)] : op_->peer;  // a group rank
  }

 private:
  Engine* e_;
  int r_;
  std::shared_ptr<P2POp> op_;
  std::shared_ptr<const GroupInfo> g_;
};

class AsyncWork final : public WorkImpl {
 public:
  explicit AsyncWork(std::shared_ptr<AsyncColl> a) : a_(std::move(a)) {}
  bool is_completed() override { return a_->engine->async_completed(*a_); }
  void wait() override { a_->engine->wait_async(a_->rank, *a_); }

 private:
  std::shared_ptr<AsyncColl> a_;
};

class RankBackend final : public BackendImpl {
 public:
  RankBackend(Engine* e, int r) : e_(e), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return e_->size(); }

  // Ranks arrive as group ranks; the engine works in world ranks plus the group's id.
  static int world_of(const Group& g, int group_rank) {
    return g.is_world() ? group_rank : g.info()->ranks[static_cast<std::size_t>(group_rank)];
  }
  static std::shared_ptr<const GroupInfo> info_of(const Group& g) {
    return g.is_world() ? nullptr : g.shared_info();
  }
  static int group_of(const Group& g, int world_rank) {
    return g.is_world() ? world_rank : g.info()->group_of[static_cast<std::size_t>(world_rank)];
  }
  std::shared_ptr<P2POp> post(bool is_send, bool blocking, const void* sbuf, void* rbuf,
                              std::size_t count, DataType type, int peer, int tag, const Group& g) {
    return e_->post(r_, is_send, blocking, sbuf, rbuf, count, type,
                    peer == kAnySource ? peer : world_of(g, peer), tag, info_of(g));
  }

  void send(const void* buf, std::size_t count, DataType type, int dst, int tag,
            const Group& g) override {
    e_->wait_p2p(r_, post(true, true, buf, nullptr, count, type, dst, tag, g));
  }
  void recv(void* buf, std::size_t count, DataType type, int src, int tag,
            const Group& g) override {
    e_->wait_p2p(r_, post(false, true, nullptr, buf, count, type, src, tag, g));
  }
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag,
             const Group& g) override {
    return Work(std::make_shared<P2PWork>(
        e_, r_, post(true, false, buf, nullptr, count, type, dst, tag, g), info_of(g)));
  }
  Work irecv(void* buf, std::size_t count, DataType type, int src, int tag,
             const Group& g) override {
    return Work(std::make_shared<P2PWork>(
        e_, r_, post(false, false, nullptr, buf, count, type, src, tag, g), info_of(g)));
  }
  int recv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override {
    auto op = post(false, true, nullptr, buf, count, type, kAnySource, tag, g);
    e_->wait_p2p(r_, op);
    return group_of(g, op->peer);
  }
  Work irecv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override {
    return Work(std::make_shared<P2PWork>(
        e_, r_, post(false, false, nullptr, buf, count, type, kAnySource, tag, g), info_of(g)));
  }
  void barrier(const Group& g) override {
    e_->collective(r_, make(CollKind::Barrier, nullptr, nullptr, 0, DataType::Float32, g));
  }

  void broadcast(void* buf, std::size_t count, DataType type, int src, const Group& g) override {
    auto c = make(CollKind::Broadcast, buf, buf, count, type, g);
    c.root = src;
    e_->collective(r_, c);
  }
  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst,
              const Group& g) override {
    auto c = make(CollKind::Reduce, buf, buf, count, type, g);
    c.op = op;
    c.root = dst;
    e_->collective(r_, c);
  }
  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                  const Group& g) override {
    auto c = make(CollKind::AllReduce, buf, buf, count, type, g);
    c.op = op;
    e_->collective(r_, c);
  }
  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op,
                        const Group& g) override {
    auto c = make(CollKind::AllReduce, buf, buf, count, type, g);
    c.op = op;
    return Work(std::make_shared<AsyncWork>(e_->collective_async(r_, c)));
  }
  void gather(const void* in, void* out, std::size_t count, DataType type, int dst,
              const Group& g) override {
    auto c = make(CollKind::Gather, in, out, count, type, g);
    c.root = dst;
    e_->collective(r_, c);
  }
  void all_gather(const void* in, void* out, std::size_t count, DataType type,
                  const Group& g) override {
    e_->collective(r_, make(CollKind::AllGather, in, out, count, type, g));
  }
  void scatter(const void* in, void* out, std::size_t count, DataType type, int src,
               const Group& g) override {
    auto c = make(CollKind::Scatter, in, out, count, type, g);
    c.root = src;
    e_->collective(r_, c);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type, ReduceOp op,
                      const Group& g) override {
    auto c = make(CollKind::ReduceScatter, in, out, count, type, g);
    c.op = op;
    e_->collective(r_, c);
  }

  std::shared_ptr<const GroupInfo> new_group(const std::vector<int>& ranks,
                                             const std::string& name) override {
    auto c = make(CollKind::NewGroup, nullptr, nullptr, 0, DataType::Float32, Group{});
    c.members = ranks;
    c.label = name;
    return owned(e_->collective(r_, c)->created[static_cast<std::size_t>(r_)]);
  }
  std::shared_ptr<const GroupInfo> split(int color, int key, const Group& parent,
                                         const std::string& name) override {
    auto c = make(CollKind::Split, nullptr, nullptr, 0, DataType::Float32, parent);
    c.color = color;
    c.key = key;
    c.label = name;
    return owned(e_->collective(r_, c)->created[static_cast<std::size_t>(parent.rank())]);
  }
  // This rank's own copy, marked as created by this backend.
  std::shared_ptr<const GroupInfo> owned(const std::shared_ptr<const GroupInfo>& g) const {
    auto mine = std::make_shared<GroupInfo>(*g);
    mine->owner = this;
    return mine;
  }

  Stats stats() override { return e_->rank_state(r_).stats; }
  void reset_stats() override { e_->reset_stats(r_); }
  double sim_time() override { return e_->rank_state(r_).link.clock; }
  void sim_compute(double seconds, const char* label) override {
    e_->sim_compute(r_, seconds, label);
  }
  void sim_reduce(std::size_t bytes) override { e_->sim_reduce(r_, bytes); }

 private:
  static CollCall make(CollKind kind, const void* in, void* out, std::size_t count, DataType type,
                       const Group& g) {
    CollCall c;
    c.group = info_of(g);
    c.kind = kind;
    c.in = in;
    c.out = out;
    c.count = count;
    c.type = type;
    return c;
  }
  Engine* e_;
  int r_;
};

}  // namespace
}  // namespace threads

using threads::Engine;
using threads::RankBackend;

void launch_threads(const LaunchOptions& options, const std::function<void()>& body) {
  auto engine = std::make_shared<Engine>(options, body);
  std::vector<std::thread> rank_threads;
  rank_threads.reserve(static_cast<std::size_t>(options.world_size));
  for (int r = 0; r < options.world_size; ++r) {
    try {
      rank_threads.emplace_back([engine, r] {
        RankBackend backend(engine.get(), r);
        engine->run_rank(r, backend);
      });
    } catch (const std::system_error& e) {
      engine->abort_start(r, "could not start thread " + std::to_string(r) + " of " +
                                 std::to_string(options.world_size) + ": " + e.what() +
                                 "; use a smaller world size");
      break;
    }
  }
  rank_threads.resize(static_cast<std::size_t>(options.world_size));
  engine->wait_for_ranks(rank_threads);
  std::exception_ptr error = engine->first_error();
  try {
    engine->write_trace();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dist::detail
