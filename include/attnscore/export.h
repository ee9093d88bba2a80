// ATTNSCORE_API marks what the shared library exports: the public classes
// and functions, nothing else (the library builds with hidden visibility).
#ifndef ATTNSCORE_EXPORT_H_
#define ATTNSCORE_EXPORT_H_

#define ATTNSCORE_API __attribute__((visibility("default")))

#endif  // ATTNSCORE_EXPORT_H_
