#include "repository.h"

#include <utility>

namespace attnscore::server {

Status ModelRepository::Open(const std::string& folder,
                             std::unique_ptr<ModelRepository>* repository) {
  std::unique_ptr<ModelRepository> opened(new ModelRepository(folder));
  ATTNSCORE_RETURN_IF_ERROR(LoadModels(folder, &opened->models_));
  *repository = std::move(opened);
  return Status::Ok();
}

std::shared_ptr<const Model> ModelRepository::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = models_.find(name);
  return found == models_.end() ? nullptr : found->second;
}

size_t ModelRepository::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return models_.size();
}

std::vector<ModelRepository::Entry> ModelRepository::Index() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Entry> entries;
  for (const auto& [name, model] : models_) {
    entries.push_back({name, model->ready(), model->not_ready_reason()});
  }
  return entries;
}

int ModelRepository::Load(const std::string& name, std::string* error) {
  std::lock_guard<std::mutex> changing(change_mutex_);
  // Made outside the map's lock: a file may take a while to read.
  std::shared_ptr<const Model> model = MakeModel(folder_, name);
  if (model == nullptr) {
    const std::string file = folder_.empty() ? std::string("(the server has no --models folder)")
                                             : folder_ + "/" + name + ".safetensors";
    if (Find(name) == nullptr) {
      *error = "no model '" + name + "' to load: neither built in nor a file " + file;
      return 404;
    }
    model = std::make_shared<Model>(name, "its file " + file + " is gone");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    models_[name] = model;
  }
  if (model->ready()) return 200;
  *error = "model '" + name + "' failed to load: " + model->not_ready_reason();
  return 400;
}

int ModelRepository::Unload(const std::string& name, std::string* error) {
  std::lock_guard<std::mutex> changing(change_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = models_.find(name);
  if (found == models_.end()) {
    *error = "unknown model '" + name + "'";
    return 404;
  }
  found->second = std::make_shared<Model>(
      name, "unloaded (POST /v2/repository/models/" + name + "/load loads it again)");
  return 200;
}

}  // namespace attnscore::server
