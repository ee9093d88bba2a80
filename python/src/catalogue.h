// attnscore.catalogue() and attnscore.Op: the catalogue's entries and
// their generic call, for NumPy arrays (python/src/catalogue.cc).
#ifndef ATTNSCORE_PYTHON_CATALOGUE_H_
#define ATTNSCORE_PYTHON_CATALOGUE_H_

#include <pybind11/pybind11.h>

namespace attnscore::python {

void BindCatalogue(pybind11::module_& m);

}  // namespace attnscore::python

#endif  // ATTNSCORE_PYTHON_CATALOGUE_H_
