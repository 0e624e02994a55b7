// The C entry of a kernel call (septran/runtime/fast_call.py builds it with septran/build/pyext.py).
//
// A `Calls` object holds, per kernel, the plans of a few call signatures (septran/runtime/plan.py) whose
// tensors go to a compiled C function untouched: it checks a call exactly as Plan.run does (each argument's
// place, a tensor's type, dtype, shape, device and contiguity, a scalar's exact value, that no tensor the kernel
// writes shares memory with another), allocates the outputs and calls the function's address. Where anything
// differs it returns NotImplemented and the Python path runs, which says what is wrong: the messages are
// the Python path's. Calling through Python (ctypes, torch.empty) costs 12 us per call on a slow core; this
// costs well under one.
//
// It reads tensors through torch's C++ API (TensorImpl) and only what ATen/core/TensorBase.h declares, not
// torch/csrc/autograd/python_variable.h (a 20 s compile of pybind11): the Python object's layout is declared
// below for the torch version it is built against (SEPTRAN_THPVARIABLE_*), and pyext.py checks it on load.
#include <Python.h>
#include <structmember.h>

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/TensorBase.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(SEPTRAN_THPVARIABLE_MAYBE_OWNED)
#include <c10/util/MaybeOwned.h>
struct THPVariable {
  PyObject_HEAD c10::MaybeOwned<at::TensorBase> cdata;
};
static inline const at::TensorBase& unpack(PyObject* obj) { return *reinterpret_cast<THPVariable*>(obj)->cdata; }
#else
struct THPVariable {
  PyObject_HEAD at::TensorBase cdata;
};
static inline const at::TensorBase& unpack(PyObject* obj) { return reinterpret_cast<THPVariable*>(obj)->cdata; }
#endif

extern PyObject* THPVariableClass;  // torch.Tensor (libtorch_python)
extern PyObject* ParameterClass;    // torch.nn.Parameter
PyObject* THPVariable_Wrap(at::TensorBase&& var);

namespace {

constexpr int kMaxArgs = 12;     // the function's arguments (addresses, then sizes)
constexpr int kMaxEntries = 8;   // signatures kept per kernel (most recent first)
constexpr int64_t kReleaseGilBytes = 1 << 18;  // above this much data the call lets other Python threads run
constexpr int64_t kReuseBytes = 1 << 16;  // outputs up to this size are recycled (allocating one costs ~2 us)

// A dense host tensor: the host backend, no functionality key (negative or conjugate bit, names, Python
// dispatch, functorch wrappers...): only autograd's and autocast's keys besides, which every tensor has.
bool plain_host(c10::TensorImpl* t) {
  auto base = t->key_set() - c10::autograd_dispatch_keyset_with_ADInplaceOrView - c10::autocast_dispatch_keyset;
  return base == c10::DispatchKeySet(c10::DispatchKey::CPU);
}

bool is_tensor_type(PyObject* obj) {
  PyTypeObject* tp = Py_TYPE(obj);
  return tp == (PyTypeObject*)THPVariableClass || tp == (PyTypeObject*)ParameterClass;
}

struct Slot {          // one argument of the call
  bool tensor;
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  PyObject* value;     // a scalar's exact value (owned); null for a tensor
  PyObject* keyword;   // its keyword (owned, interned); null for a positional argument
};

struct Allocation {
  bool zero;
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // contiguous
  int64_t nbytes;
  PyObject* held = nullptr;  // owned: the last output, handed out again once its caller has dropped it (small ones)
};

struct Entry {
  Py_ssize_t npos = 0, nkw = 0;
  std::vector<Slot> slots;          // positional ones first, then keywords
  std::vector<int> take;            // pool index -> slot
  std::vector<int64_t> nbytes;      // per passed tensor
  std::vector<std::pair<int, int>> overlap;  // (written, other) pool indices
  std::vector<Allocation> allocate; // appended to the pool
  void* fn = nullptr;
  std::vector<int> order;           // the function's tensor arguments, as pool indices
  std::vector<std::tuple<int, int, bool>> dims;  // (pool index, axis, 64-bit) of each size argument
  std::vector<int> results;
  bool single = false;
  bool release_gil = false;
  int threads = -1;                 // the thread count the plan was chosen for (torch's), -1: any
  PyObject* variant = nullptr;      // owned
  PyObject* name = nullptr;         // owned: the function's name, for the error
  PyObject* plan = nullptr;         // owned: keeps the library loaded
  int busy = 0;                     // calls running it with the GIL released (another thread may drop it meanwhile)
  bool dropped = false;             // dropped while busy: the last call out deletes it
};

struct Calls {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* owner;        // the kernel's __dict__ (owned): `_last` is set there, as Kernel.__call__ does
  PyObject* error;        // DeviceError (owned)
  std::vector<Entry*>* entries;
};

PyObject* s_last = nullptr;
PyObject* s_fast = nullptr;
PyObject* s_call = nullptr;
extern PyTypeObject CallsType;

void clear_entry(Entry* e) {
  if (e->busy) {
    e->dropped = true;
    return;
  }
  for (auto& a : e->allocate) Py_CLEAR(a.held);
  for (auto& s : e->slots) {
    Py_CLEAR(s.value);
    Py_CLEAR(s.keyword);
  }
  Py_CLEAR(e->variant);
  Py_CLEAR(e->name);
  Py_CLEAR(e->plan);
  delete e;
}

bool same_scalar(PyObject* want, PyObject* got) {
  if (Py_TYPE(want) != Py_TYPE(got)) return false;
  if (PyFloat_CheckExact(want)) {  // the same bits: what repr() tells apart (-0.0 from 0.0)
    double a = PyFloat_AS_DOUBLE(want), b = PyFloat_AS_DOUBLE(got);
    return std::memcmp(&a, &b, sizeof a) == 0;
  }
  if (PyBool_Check(want)) return want == got;
  int eq = PyObject_RichCompareBool(want, got, Py_EQ);  // int
  if (eq < 0) {
    PyErr_Clear();
    return false;
  }
  return eq == 1;
}

// A call's keyword arguments: a dict (Calls(args, kwargs)) or a vectorcall's names and values (Dispatch).
struct Keywords {
  PyObject* dict = nullptr;
  PyObject* names = nullptr;  // tuple of str
  PyObject* const* values = nullptr;
  Py_ssize_t size() const {
    return dict ? PyDict_GET_SIZE(dict) : names ? PyTuple_GET_SIZE(names) : 0;
  }
  PyObject* get(PyObject* key) const {  // borrowed, or null (no error set)
    if (dict) {
      PyObject* v = PyDict_GetItemWithError(dict, key);
      if (!v) PyErr_Clear();
      return v;
    }
    Py_ssize_t n = size();
    for (Py_ssize_t i = 0; i < n; i++)  // the names a call site spells are interned, as the slots' are
      if (PyTuple_GET_ITEM(names, i) == key) return values[i];
    for (Py_ssize_t i = 0; i < n; i++)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(names, i), key) == 0) return values[i];
    if (PyErr_Occurred()) PyErr_Clear();
    return nullptr;
  }
};

// The argument in a slot, or null (borrowed).
inline PyObject* argument(const Slot& s, int k, PyObject* const* args, const Keywords& kw) {
  if (!s.keyword) return args[k];
  return kw.get(s.keyword);
}

int64_t call_function(void* fn, const int64_t* a, int n) {
  using I = int64_t;
  switch (n) {  // the x86-64 and AArch64 calling conventions pass addresses and integers alike
#define F(...) return reinterpret_cast<int32_t (*)(__VA_ARGS__)>(fn)
    case 1: F(I)(a[0]);
    case 2: F(I, I)(a[0], a[1]);
    case 3: F(I, I, I)(a[0], a[1], a[2]);
    case 4: F(I, I, I, I)(a[0], a[1], a[2], a[3]);
    case 5: F(I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4]);
    case 6: F(I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5]);
    case 7: F(I, I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
    case 8: F(I, I, I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    case 9: F(I, I, I, I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
    case 10: F(I, I, I, I, I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]);
    case 11: F(I, I, I, I, I, I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
    case 12: F(I, I, I, I, I, I, I, I, I, I, I, I)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11]);
#undef F
  }
  return -1;
}

// The output of an earlier call, unchanged and referenced by nothing but this entry, is as good as a new one
// (torch.empty's memory holds anything too): no other Python reference, weak reference or attribute, no other
// C++ reference to the tensor or its storage (views, autograd, DLPack), no autograd state, the same shape,
// strides, dtype, memory and inference mode. Its version counter is started again, as a new tensor's.
bool reusable(PyObject* obj, const Allocation& al) {
  if (Py_REFCNT(obj) != 1) return false;
  PyTypeObject* tp = Py_TYPE(obj);
  if (tp->tp_weaklistoffset <= 0 || *(PyObject**)((char*)obj + tp->tp_weaklistoffset)) return false;
  PyObject** dict = _PyObject_GetDictPtr(obj);
  if (dict && *dict && PyDict_GET_SIZE(*dict)) return false;
  const at::TensorBase& t = unpack(obj);
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (t.use_count() != 1 || t.weak_use_count() != 1 || !plain_host(impl) || impl->autograd_meta()) return false;
  const c10::Storage& st = impl->storage();
  if (st.use_count() != 1 || (int64_t)st.nbytes() != al.nbytes || impl->storage_offset() != 0) return false;
  if (impl->dtype().toScalarType() != al.dtype || !impl->is_contiguous()) return false;
  auto sizes = impl->sizes(), strides = impl->strides();
  if (!std::equal(sizes.begin(), sizes.end(), al.sizes.begin(), al.sizes.end()) ||
      !std::equal(strides.begin(), strides.end(), al.strides.begin(), al.strides.end()))
    return false;
  bool inference = c10::InferenceMode::is_enabled();
  if (impl->is_inference() != inference) return false;
  if (!inference && impl->version_counter().current_version() != 0) impl->set_version_counter(c10::VariableVersion(0));
  return true;
}

// The call with one entry: its result (new reference), Py_NotImplemented where the call is not the entry's,
// null with an exception set where the kernel failed.
PyObject* run(Calls* self, Entry* e, PyObject* const* args, Py_ssize_t npos, const Keywords& kwargs) {
  if (npos != e->npos) return Py_NotImplemented;
  if (kwargs.size() != e->nkw) return Py_NotImplemented;
  if (e->threads >= 0 && at::get_num_threads() != e->threads) return Py_NotImplemented;
  PyObject* given[kMaxArgs * 2];
  c10::TensorImpl* impls[kMaxArgs * 2];
  int nslots = (int)e->slots.size();
  for (int k = 0; k < nslots; k++) {
    const Slot& s = e->slots[k];
    PyObject* a = argument(s, k, args, kwargs);
    if (!a) return Py_NotImplemented;
    given[k] = a;
    if (!s.tensor) {
      if (!same_scalar(s.value, a)) return Py_NotImplemented;
      continue;
    }
    if (!is_tensor_type(a)) return Py_NotImplemented;
    c10::TensorImpl* t = unpack(a).unsafeGetTensorImpl();
    if (!plain_host(t) || t->dtype().toScalarType() != s.dtype || !t->is_contiguous()) return Py_NotImplemented;
    auto sizes = t->sizes();
    if ((size_t)sizes.size() != s.sizes.size() || !std::equal(sizes.begin(), sizes.end(), s.sizes.begin()))
      return Py_NotImplemented;
    impls[k] = t;
  }
  size_t ntake = e->take.size();
  int64_t ptr[kMaxArgs * 2];
  PyObject* pool[kMaxArgs * 2];
  for (size_t i = 0; i < ntake; i++) {
    ptr[i] = (int64_t)(intptr_t)impls[e->take[i]]->mutable_data();
    pool[i] = given[e->take[i]];
  }
  for (auto [o, j] : e->overlap)  // shared memory: the Python path raises the error that names both
    if (ptr[j] < ptr[o] + e->nbytes[o] && ptr[o] < ptr[j] + e->nbytes[j]) return Py_NotImplemented;
  // outputs: recycled, else allocated (and wrapped, so that nothing can fail once the kernel has run)
  PyObject* dropped[kMaxArgs];
  size_t ndropped = 0;
  for (size_t i = 0; i < e->allocate.size(); i++) {
    Allocation& al = e->allocate[i];
    PyObject* obj = al.held;
    if (!obj || !reusable(obj, al)) {
      try {
        obj = THPVariable_Wrap(at::detail::empty_cpu(al.sizes, al.dtype));
      } catch (const std::exception&) {  // out of memory: the Python path says so
        obj = nullptr;
      }
      if (!obj) {
        for (size_t j = 0; j < i; j++) Py_DECREF(pool[ntake + j]);
        for (size_t j = 0; j < ndropped; j++) Py_DECREF(dropped[j]);
        if (!PyErr_Occurred()) return Py_NotImplemented;
        return nullptr;
      }
      if (al.nbytes <= kReuseBytes) {  // held instead of the last one (which its caller still holds, or not)
        if (al.held) dropped[ndropped++] = al.held;
        al.held = Py_NewRef(obj);
      }
    } else {
      Py_INCREF(obj);
    }
    void* p = unpack(obj).unsafeGetTensorImpl()->mutable_data();
    if (al.zero) std::memset(p, 0, (size_t)al.nbytes);
    pool[ntake + i] = obj;  // a new reference
    ptr[ntake + i] = (int64_t)(intptr_t)p;
  }
  auto release = [&]() {  // last: dropping a reference can run any code (a weak reference's callback)
    for (size_t i = 0; i < e->allocate.size(); i++) Py_DECREF(pool[ntake + i]);
    for (size_t j = 0; j < ndropped; j++) Py_DECREF(dropped[j]);
  };
  int64_t call[kMaxArgs];
  int n = 0;
  for (int k : e->order) call[n++] = ptr[k];
  for (auto [k, axis, wide] : e->dims) {
    int64_t v = k < (int)ntake ? impls[e->take[k]]->sizes()[axis] : e->allocate[k - ntake].sizes[axis];
    call[n++] = wide ? v : (int64_t)(int32_t)v;
  }
  int64_t code;
  if (e->release_gil) {
    e->busy++;
    Py_BEGIN_ALLOW_THREADS code = call_function(e->fn, call, n);
    Py_END_ALLOW_THREADS
    e->busy--;
  } else {
    code = call_function(e->fn, call, n);
  }
  PyObject* out = nullptr;
  if (code) {
    PyErr_Format(self->error, "%U returned %d", e->name, (int)code);
  } else if (PyDict_SetItem(self->owner, s_last, e->variant) == 0) {
    if (e->single) {
      out = Py_NewRef(pool[e->results[0]]);
    } else if ((out = PyTuple_New((Py_ssize_t)e->results.size()))) {
      for (size_t i = 0; i < e->results.size(); i++) PyTuple_SET_ITEM(out, (Py_ssize_t)i, Py_NewRef(pool[e->results[i]]));
    }
  }
  release();
  if (e->dropped && !e->busy) clear_entry(e);
  return out;
}

// The kernel's result from the first entry that takes the call, or NotImplemented (new references).
PyObject* call_entries(Calls* self, PyObject* const* args, Py_ssize_t nargs, const Keywords& kw) {
  auto& entries = *self->entries;
  try {
    for (size_t i = 0; i < entries.size(); i++) {
      Entry* e = entries[i];
      PyObject* out = run(self, e, args, nargs, kw);
      if (out == Py_NotImplemented) continue;
      if (i && i < entries.size() && entries[i] == e) std::swap(entries[i], entries[0]);  // tried first next time
      return out;
    }
  } catch (const std::exception&) {  // a check torch refuses (before anything is allocated): the Python path
    if (!PyErr_Occurred()) return Py_NewRef(Py_NotImplemented);
    return nullptr;
  }
  return Py_NewRef(Py_NotImplemented);
}

// calls(args, kwargs): the kernel's result, or NotImplemented (the Python path then runs).
PyObject* calls_vectorcall(PyObject* callable, PyObject* const* argv, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 2 || kwnames || !PyTuple_CheckExact(argv[0]) || !PyDict_CheckExact(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "Calls takes (args: tuple, kwargs: dict)");
    return nullptr;
  }
  Keywords kw;
  kw.dict = argv[1];
  return call_entries((Calls*)callable, &PyTuple_GET_ITEM(argv[0], 0), PyTuple_GET_SIZE(argv[0]), kw);
}

template <typename T>
bool ints(PyObject* seq, std::vector<T>& out) {
  PyObject* fast = PySequence_Fast(seq, "a sequence of integers");
  if (!fast) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    out.push_back((T)v);
  }
  Py_DECREF(fast);
  return true;
}

// add(args, kwargs, take, nbytes, overlap, allocate, fn, order, dims, results, single, variant, name, plan[, threads]):
// the plan of the call (args, kwargs), taken if the call is one the C entry can check (True), else False;
// threads: the plan runs only while torch's thread count is that (-1, the default: at any).
// take: the passed tensors' places (positions or keywords); allocate: (zero, shape, a tensor of the dtype);
// dims: (pool index, axis, 64-bit); the rest as in Plan's Layout.
PyObject* calls_add(PyObject* pyself, PyObject* a) {
  Calls* self = (Calls*)pyself;
  PyObject *args, *kwargs, *take, *nbytes, *overlap, *allocate, *fnaddr, *order, *dims, *results, *variant, *name, *plan;
  int single, threads = -1;
  if (!PyArg_ParseTuple(a, "O!O!OOOOOOOOpOUO|i", &PyTuple_Type, &args, &PyDict_Type, &kwargs, &take, &nbytes, &overlap,
                        &allocate, &fnaddr, &order, &dims, &results, &single, &variant, &name, &plan, &threads))
    return nullptr;
  auto* e = new Entry();
  e->threads = threads;
  bool ok = true;
  auto refuse = [&]() -> PyObject* {
    clear_entry(e);
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_FALSE;
  };
  e->npos = PyTuple_GET_SIZE(args);
  e->nkw = PyDict_GET_SIZE(kwargs);
  if (e->npos + e->nkw > kMaxArgs * 2) return refuse();
  auto slot_of = [&](PyObject* value, PyObject* keyword) -> bool {
    Slot s{false, c10::ScalarType::Undefined, {}, nullptr, nullptr};
    if (keyword) {
      Py_INCREF(keyword);
      PyUnicode_InternInPlace(&keyword);
      s.keyword = keyword;
    }
    if (is_tensor_type(value)) {
      c10::TensorImpl* t = unpack(value).unsafeGetTensorImpl();
      if (!plain_host(t)) {
        e->slots.push_back(s);
        return false;
      }
      s.tensor = true;
      s.dtype = t->dtype().toScalarType();
      auto sizes = t->sizes();
      s.sizes.assign(sizes.begin(), sizes.end());
    } else if (PyFloat_CheckExact(value) || PyLong_CheckExact(value) || PyBool_Check(value)) {
      Py_INCREF(value);
      s.value = value;
    } else {
      e->slots.push_back(s);
      return false;
    }
    e->slots.push_back(s);
    return true;
  };
  for (Py_ssize_t i = 0; i < e->npos && ok; i++) ok = slot_of(PyTuple_GET_ITEM(args, i), nullptr);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (ok && PyDict_Next(kwargs, &pos, &key, &value)) ok = PyUnicode_CheckExact(key) && slot_of(value, key);
  if (!ok) return refuse();
  // take: positions, or keywords (the slot holding that keyword)
  PyObject* tk = PySequence_Fast(take, "take");
  if (!tk) return refuse();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(tk) && ok; i++) {
    PyObject* src = PySequence_Fast_GET_ITEM(tk, i);
    int found = -1;
    if (PyLong_Check(src)) {
      long k = PyLong_AsLong(src);
      if (k >= 0 && k < e->npos) found = (int)k;
    } else {
      for (size_t k = e->npos; k < e->slots.size(); k++)
        if (PyUnicode_Compare(e->slots[k].keyword, src) == 0) found = (int)k;
    }
    ok = found >= 0 && e->slots[found].tensor;
    e->take.push_back(found);
  }
  Py_DECREF(tk);
  if (!ok || PyErr_Occurred()) return refuse();
  if (!ints(nbytes, e->nbytes)) return refuse();
  PyObject* ov = PySequence_Fast(overlap, "overlap");
  if (!ov) return refuse();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ov) && ok; i++) {
    std::vector<int> pair;
    ok = ints(PySequence_Fast_GET_ITEM(ov, i), pair) && pair.size() == 2;
    if (ok) e->overlap.emplace_back(pair[0], pair[1]);
  }
  Py_DECREF(ov);
  if (!ok) return refuse();
  PyObject* al = PySequence_Fast(allocate, "allocate");
  if (!al) return refuse();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(al) && ok; i++) {
    PyObject *zero, *shape, *sample;
    ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(al, i), "OOO", &zero, &shape, &sample) && is_tensor_type(sample);
    if (!ok) break;
    Allocation x;
    x.zero = PyObject_IsTrue(zero) == 1;
    x.dtype = unpack(sample).unsafeGetTensorImpl()->dtype().toScalarType();
    ok = ints(shape, x.sizes);
    int64_t count = 1;
    x.strides.assign(x.sizes.size(), 1);
    for (size_t d = x.sizes.size(); d-- > 0;) {
      x.strides[d] = count;
      count *= x.sizes[d];
    }
    x.nbytes = count * (int64_t)unpack(sample).unsafeGetTensorImpl()->dtype().itemsize();
    e->allocate.push_back(std::move(x));
  }
  Py_DECREF(al);
  if (!ok || e->allocate.size() > (size_t)kMaxArgs || e->take.size() > (size_t)kMaxArgs) return refuse();
  e->fn = PyLong_AsVoidPtr(fnaddr);
  if (!e->fn || !ints(order, e->order) || !ints(results, e->results)) return refuse();
  PyObject* dm = PySequence_Fast(dims, "dims");
  if (!dm) return refuse();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(dm) && ok; i++) {
    std::vector<int64_t> d;
    ok = ints(PySequence_Fast_GET_ITEM(dm, i), d) && d.size() == 3;
    if (ok) e->dims.emplace_back((int)d[0], (int)d[1], d[2] != 0);
  }
  Py_DECREF(dm);
  if (!ok || e->order.size() + e->dims.size() > (size_t)kMaxArgs || e->order.size() + e->dims.size() == 0) return refuse();
  size_t npool = e->take.size() + e->allocate.size();
  for (int k : e->order) ok = ok && k >= 0 && (size_t)k < npool;
  for (int k : e->results) ok = ok && k >= 0 && (size_t)k < npool;
  for (auto [o, j] : e->overlap) ok = ok && o >= 0 && j >= 0 && (size_t)o < e->take.size() && (size_t)j < e->take.size();
  for (auto [k, axis, wide] : e->dims) {
    ok = ok && k >= 0 && (size_t)k < npool;
    if (ok) {
      size_t rank = (size_t)k < e->take.size() ? e->slots[e->take[k]].sizes.size() : e->allocate[k - e->take.size()].sizes.size();
      ok = axis >= 0 && (size_t)axis < rank;
    }
    (void)wide;
  }
  ok = ok && e->nbytes.size() == e->take.size() && (!single || e->results.size() == 1);
  if (!ok) return refuse();
  int64_t total = 0;
  for (int64_t b : e->nbytes) total += b;
  for (auto& x : e->allocate) total += x.nbytes;
  e->release_gil = total > kReleaseGilBytes;
  e->single = single;
  e->variant = Py_NewRef(variant);
  e->name = Py_NewRef(name);
  e->plan = Py_NewRef(plan);
  auto& entries = *self->entries;
  // the same signature (and thread count) again (a plan made anew): replaced
  for (size_t i = 0; i < entries.size(); i++) {
    Entry* old = entries[i];
    bool same = old->npos == e->npos && old->nkw == e->nkw && old->slots.size() == e->slots.size() &&
                old->threads == e->threads;
    for (size_t k = 0; same && k < e->slots.size(); k++) {
      const Slot &x = old->slots[k], &y = e->slots[k];
      same = x.tensor == y.tensor && x.dtype == y.dtype && x.sizes == y.sizes &&
             (x.keyword ? y.keyword && PyUnicode_Compare(x.keyword, y.keyword) == 0 : !y.keyword) &&
             (x.tensor || same_scalar(x.value, y.value));
    }
    if (same) {
      clear_entry(old);
      entries.erase(entries.begin() + (Py_ssize_t)i);
      break;
    }
  }
  if (entries.size() >= (size_t)kMaxEntries) {
    clear_entry(entries.back());
    entries.pop_back();
  }
  entries.insert(entries.begin(), e);
  Py_RETURN_TRUE;
}

PyObject* calls_len(PyObject* pyself, PyObject*) {
  return PyLong_FromSize_t(((Calls*)pyself)->entries->size());
}

int calls_traverse(PyObject* pyself, visitproc visit, void* arg) {
  Calls* self = (Calls*)pyself;
  Py_VISIT(self->owner);
  Py_VISIT(self->error);
  if (self->entries)
    for (Entry* e : *self->entries) {
      Py_VISIT(e->variant);
      Py_VISIT(e->plan);
      for (auto& a : e->allocate) Py_VISIT(a.held);
    }
  return 0;
}

int calls_clear(PyObject* pyself) {
  Calls* self = (Calls*)pyself;
  Py_CLEAR(self->owner);
  Py_CLEAR(self->error);
  if (self->entries) {
    for (Entry* e : *self->entries) clear_entry(e);
    self->entries->clear();
  }
  return 0;
}

void calls_dealloc(PyObject* pyself) {
  Calls* self = (Calls*)pyself;
  PyObject_GC_UnTrack(pyself);
  calls_clear(pyself);
  delete self->entries;
  Py_TYPE(pyself)->tp_free(pyself);
}

PyObject* calls_new(PyTypeObject* type, PyObject* a, PyObject* kw) {
  PyObject *owner, *error;
  if (kw && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "Calls(owner_dict, error_class)");
    return nullptr;
  }
  if (!PyArg_ParseTuple(a, "O!O", &PyDict_Type, &owner, &error)) return nullptr;
  Calls* self = (Calls*)type->tp_alloc(type, 0);
  if (!self) return nullptr;
  self->vectorcall = calls_vectorcall;
  self->owner = Py_NewRef(owner);
  self->error = Py_NewRef(error);
  self->entries = new std::vector<Entry*>();
  return (PyObject*)self;
}

// probe(tensor): (address, shape, itemsize) as this module reads them (pyext.py compares them with torch's).
PyObject* probe(PyObject*, PyObject* t) {
  if (!is_tensor_type(t)) {
    PyErr_SetString(PyExc_TypeError, "probe takes a torch.Tensor");
    return nullptr;
  }
  c10::TensorImpl* impl = unpack(t).unsafeGetTensorImpl();
  PyObject* shape = PyTuple_New((Py_ssize_t)impl->dim());
  if (!shape) return nullptr;
  for (int64_t i = 0; i < impl->dim(); i++) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(impl->sizes()[i]));
  return Py_BuildValue("(NNn)", PyLong_FromVoidPtr(impl->mutable_data()), shape, (Py_ssize_t)impl->dtype().itemsize());
}

PyMethodDef calls_methods[] = {
    {"add", calls_add, METH_VARARGS, "add(args, kwargs, take, ...): hold the plan of this call's signature; False if it cannot"},
    {"size", calls_len, METH_NOARGS, "how many signatures are held"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject CallsType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// The call run by the plans `self`'s `_fast` (a Calls) holds: its result, NotImplemented (not one it holds, or no
// `_fast`), both new references, or null with an exception set.
PyObject* held_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, const Keywords& kw) {
  PyObject** dict = _PyObject_GetDictPtr(self);
  PyObject* fast = dict && *dict ? PyDict_GetItemWithError(*dict, s_fast) : nullptr;
  if (!fast || Py_TYPE(fast) != &CallsType) return PyErr_Occurred() ? nullptr : Py_NewRef(Py_NotImplemented);
  Py_INCREF(fast);
  PyObject* out = call_entries((Calls*)fast, args, nargs, kw);
  Py_DECREF(fast);
  return out;
}

// Dispatch(function): a class's __call__ that runs a call in C where the instance's `_fast` (a Calls) holds its
// plan, else calls `function` (the Python __call__) with the same arguments. A method descriptor: Python calls
// it with the instance first and no bound method, no Python frame, no *args tuple or **kwargs dict.
struct Dispatch {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fallback;
};

PyObject* dispatch_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Dispatch* d = (Dispatch*)callable;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs >= 1) {
    Keywords kw;
    kw.names = kwnames;
    kw.values = args + nargs;
    PyObject* out = held_call(args[0], args + 1, nargs - 1, kw);
    if (out != Py_NotImplemented) return out;
    Py_DECREF(out);
  }
  return PyObject_Vectorcall(d->fallback, args, nargsf, kwnames);
}

PyObject* dispatch_get(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

PyObject* dispatch_new(PyTypeObject* type, PyObject* a, PyObject* kw) {
  PyObject* fallback;
  if ((kw && PyDict_GET_SIZE(kw)) || !PyArg_ParseTuple(a, "O", &fallback)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Dispatch(function)");
    return nullptr;
  }
  Dispatch* self = (Dispatch*)type->tp_alloc(type, 0);
  if (!self) return nullptr;
  self->vectorcall = dispatch_vectorcall;
  self->fallback = Py_NewRef(fallback);
  return (PyObject*)self;
}

void dispatch_dealloc(PyObject* self) {
  Py_CLEAR(((Dispatch*)self)->fallback);
  Py_TYPE(self)->tp_free(self);
}

PyMemberDef dispatch_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Dispatch, fallback), READONLY, "the Python __call__ it falls back to"},
    {nullptr, 0, 0, 0, nullptr}};

PyTypeObject DispatchType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// The class's tp_call while its __call__ is a Dispatch (install below): CPython hands it the call's tuple and
// keyword dict as they are, where its generic slot looks __call__ up, prepends the instance and turns a keyword
// dict back into a vectorcall's names (an allocation and a copy: a keyword call cost 80 ns more than a
// positional one). Anything it does not hold runs the class's __call__ as the generic slot would.
PyObject* kernel_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  Keywords kw;
  kw.dict = kwargs && PyDict_GET_SIZE(kwargs) ? kwargs : nullptr;
  PyObject* out = held_call(self, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), kw);
  if (out != Py_NotImplemented) return out;
  Py_DECREF(out);
  PyObject* call = _PyType_Lookup(Py_TYPE(self), s_call);  // borrowed
  if (!call) {
    PyErr_Format(PyExc_TypeError, "'%s' object is not callable", Py_TYPE(self)->tp_name);
    return nullptr;
  }
  if (Py_TYPE(call) == &DispatchType) {  // its Python __call__, with the instance first (the entry was asked)
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    std::vector<PyObject*> stack((size_t)n + 1);
    stack[0] = self;
    for (Py_ssize_t k = 0; k < n; k++) stack[(size_t)k + 1] = PyTuple_GET_ITEM(args, k);
    Py_INCREF(call);  // (held: the call may assign cls.__call__, which frees the Dispatch it found)
    out = PyObject_VectorcallDict(((Dispatch*)call)->fallback, stack.data(), (size_t)n + 1, kwargs);
    Py_DECREF(call);
    return out;
  }
  Py_INCREF(call);
  descrgetfunc get = Py_TYPE(call)->tp_descr_get;
  PyObject* bound = get ? get(call, self, (PyObject*)Py_TYPE(self)) : Py_NewRef(call);
  Py_DECREF(call);
  if (!bound) return nullptr;
  out = PyObject_Call(bound, args, kwargs);
  Py_DECREF(bound);
  return out;
}

// install(cls): cls's instances are called through kernel_call, if cls.__call__ (in its own __dict__) is a
// Dispatch; True if they are. CPython puts its generic slot back whenever cls.__call__ is assigned (a wrapper,
// or the Dispatch again), so a wrapper sees every call, and this is asked again after.
PyObject* install(PyObject*, PyObject* cls) {
  if (!PyType_Check(cls) || !PyType_HasFeature((PyTypeObject*)cls, Py_TPFLAGS_HEAPTYPE)) {
    PyErr_SetString(PyExc_TypeError, "install takes a class defined in Python");
    return nullptr;
  }
  PyTypeObject* tp = (PyTypeObject*)cls;
  PyObject* call = PyDict_GetItemWithError(tp->tp_dict, s_call);
  if (!call && PyErr_Occurred()) return nullptr;
  if (!call || Py_TYPE(call) != &DispatchType) Py_RETURN_FALSE;
  tp->tp_call = kernel_call;
  Py_RETURN_TRUE;
}

PyMethodDef module_methods[] = {{"probe", probe, METH_O, "probe(tensor) -> (address, shape, itemsize)"},
                                {"install", install, METH_O, "install(cls): instances called in C while cls.__call__ is a Dispatch"},
                                {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "septran_fast_call", "SepTran's C entry of kernel calls", -1, module_methods};

}  // namespace

PyMODINIT_FUNC PyInit_septran_fast_call(void) {
  if (!THPVariableClass || !ParameterClass) {
    PyErr_SetString(PyExc_ImportError, "torch is not initialised");
    return nullptr;
  }
  s_last = PyUnicode_InternFromString("_last");
  s_fast = PyUnicode_InternFromString("_fast");
  s_call = PyUnicode_InternFromString("__call__");
  DispatchType.tp_name = "septran_fast_call.Dispatch";
  DispatchType.tp_basicsize = sizeof(Dispatch);
  DispatchType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  DispatchType.tp_doc = "Dispatch(function): __call__ in C for instances whose _fast holds the call's plan";
  DispatchType.tp_new = dispatch_new;
  DispatchType.tp_dealloc = dispatch_dealloc;
  DispatchType.tp_call = PyVectorcall_Call;
  DispatchType.tp_vectorcall_offset = offsetof(Dispatch, vectorcall);
  DispatchType.tp_descr_get = dispatch_get;
  DispatchType.tp_members = dispatch_members;
  if (PyType_Ready(&DispatchType) < 0) return nullptr;
  CallsType.tp_name = "septran_fast_call.Calls";
  CallsType.tp_basicsize = sizeof(Calls);
  CallsType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  CallsType.tp_doc = "Calls(kernel.__dict__, DeviceError): a kernel's plans, called from C";
  CallsType.tp_new = calls_new;
  CallsType.tp_dealloc = calls_dealloc;
  CallsType.tp_traverse = calls_traverse;
  CallsType.tp_clear = calls_clear;
  CallsType.tp_call = PyVectorcall_Call;
  CallsType.tp_vectorcall_offset = offsetof(Calls, vectorcall);
  CallsType.tp_methods = calls_methods;
  if (PyType_Ready(&CallsType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (!m) return nullptr;
  if (PyModule_AddObjectRef(m, "Calls", (PyObject*)&CallsType) < 0 ||
      PyModule_AddObjectRef(m, "Dispatch", (PyObject*)&DispatchType) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
