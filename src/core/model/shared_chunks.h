// A sequence kept in chunks shared between copies, for the engine's what-if copies of 10,000-node
// clusters: a copy copies one pointer per chunk, and a chunk is copied only when a copy changes
// an element of it (or appends to it), so a what-if that adds a node copies the last chunk alone.
//
// Invariants: every chunk but the last holds kChunkSize elements; each chunk's capacity is
// kChunkSize, so an element never moves while its chunk lives (a string_view into it stays
// valid until that chunk is copied for a change or destroyed); a chunk is changed in place only
// while one sequence alone holds it.
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

namespace tessera::core {

template <typename T, int kShift = 8>
class SharedChunks {
 public:
  static constexpr size_t kChunkSize = size_t{1} << kShift;

  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = const T*;
    using reference = const T&;
    Iterator() = default;
    reference operator*() const { return (*seq_)[i_]; }
    pointer operator->() const { return &(*seq_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iterator&) const = default;

   private:
    friend class SharedChunks;
    Iterator(const SharedChunks* seq, size_t i) : seq_(seq), i_(i) {}
    const SharedChunks* seq_ = nullptr;
    size_t i_ = 0;
  };

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return (*chunks_[i >> kShift])[i & (kChunkSize - 1)]; }
  const T& back() const { return (*this)[size_ - 1]; }
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, size_); }

  // Element `i` to change: its chunk copied first when another sequence shares it.
  T& Mutable(size_t i) { return Own(i >> kShift)[i & (kChunkSize - 1)]; }
  // A new element at the end (the last chunk copied first when shared).
  T& Append(T value = T()) {
    if ((size_ & (kChunkSize - 1)) == 0) {
      chunks_.push_back(std::make_shared<std::vector<T>>());
      chunks_.back()->reserve(kChunkSize);
    }
    std::vector<T>& last = Own(chunks_.size() - 1);
    ++size_;
    return last.emplace_back(std::move(value));
  }
  void clear() {
    chunks_.clear();
    size_ = 0;
  }

 private:
  std::vector<T>& Own(size_t c) {
    std::shared_ptr<std::vector<T>>& chunk = chunks_[c];
    if (chunk.use_count() > 1) {
      auto own = std::make_shared<std::vector<T>>();
      own->reserve(kChunkSize);
      own->insert(own->end(), chunk->begin(), chunk->end());
      chunk = std::move(own);
    }
    return *chunk;
  }

  std::vector<std::shared_ptr<std::vector<T>>> chunks_;
  size_t size_ = 0;
};

}  // namespace tessera::core
