// The models a server serves, loaded and unloaded while it runs (the
// protocol's model repository extension, as Triton defines it): the
// built-ins and one model per DIR/NAME.safetensors (models.h). Safe to use
// from any thread; a request keeps the model it runs alive even when it is
// unloaded meanwhile. docs/serving.md, "Model repository".
#ifndef ATTNSCORE_SERVER_REPOSITORY_H_
#define ATTNSCORE_SERVER_REPOSITORY_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models.h"

namespace attnscore::server {

class ModelRepository {
 public:
  // The models LoadModels finds in `folder` ("" for the built-ins alone).
  static Status Open(const std::string& folder, std::unique_ptr<ModelRepository>* repository);

  // The model `name` (ready or not), or null when the repository has none.
  std::shared_ptr<const Model> Find(const std::string& name) const;
  size_t size() const;

  struct Entry {
    std::string name;
    bool ready = false;
    std::string reason;  // why it is not ready
  };
  // Every model, by name.
  std::vector<Entry> Index() const;

  // Makes `name` again from its file (or as the built-in it is), replacing
  // what was there. Returns the answer's HTTP status: 200; 400 when its
  // file cannot be served or is gone (the model stays listed, not ready,
  // `*error` says why); 404 for a name that is neither, nor listed.
  int Load(const std::string& name, std::string* error);
  // Leaves `name` listed, not ready ("unloaded"): 200, or 404 for an
  // unknown name.
  int Unload(const std::string& name, std::string* error);

 private:
  explicit ModelRepository(std::string folder) : folder_(std::move(folder)) {}

  const std::string folder_;
  std::mutex change_mutex_;   // one Load or Unload at a time, in the order they came
  mutable std::mutex mutex_;  // guards models_
  ModelMap models_;
};

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_REPOSITORY_H_
