# The fedcase client SDK package: find_package(fedcase_client) gives the target
# fedcase::client (see client_sdk/CMakeLists.txt). Its libraries are static, so the packages
# they link are found here too; all are Debian packages (scripts/install-deps.sh).
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(nlohmann_json 3)
find_dependency(OpenSSL)
find_dependency(ZLIB)
find_dependency(PkgConfig)
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
find_dependency(Boost 1.74 COMPONENTS system)
find_dependency(Torch)
include("${CMAKE_CURRENT_LIST_DIR}/fedcase_client_targets.cmake")
