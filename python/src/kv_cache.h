// attnscore.KvCache for NumPy arrays (python/src/kv_cache.cc).
#ifndef ATTNSCORE_PYTHON_KV_CACHE_H_
#define ATTNSCORE_PYTHON_KV_CACHE_H_

#include <pybind11/pybind11.h>

namespace attnscore::python {

void BindKvCache(pybind11::module_& m);

}  // namespace attnscore::python

#endif  // ATTNSCORE_PYTHON_KV_CACHE_H_
