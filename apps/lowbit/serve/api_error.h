// An error answered to an HTTP client in OpenAI's shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
#pragma once

#include <stdexcept>
#include <string>

namespace lowbit::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)),
        type(std::move(type)) {}

  int status;
  std::string param, code, type;
};

// 400 invalid_request_error naming the field.
inline ApiError bad_request(const std::string& param, const std::string& message, const std::string& code = {}) {
  return ApiError(400, param.empty() ? message : param + ": " + message, param, code);
}

}  // namespace lowbit::serve
