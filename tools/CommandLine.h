// Command-line parsing shared by the gpipe tools (Boost.Program_options).
#ifndef GPIPE_TOOLS_COMMANDLINE_H
#define GPIPE_TOOLS_COMMANDLINE_H

#include <boost/program_options.hpp>

#include <iostream>
#include <string>

namespace gpipe {

/// Parses argv with `visible` options plus one positional argument stored in
/// `positional` (hidden from --help). On a usage error prints
/// "TOOL: error: ... (see TOOL --help)" and returns false (exit code 2).
inline bool
parseCommandLine(int argc, char **argv, const char *tool,
                 const boost::program_options::options_description &visible,
                 const char *positionalName, std::string &positional,
                 boost::program_options::variables_map &vm) {
  namespace po = boost::program_options;
  po::options_description hidden;
  hidden.add_options()(positionalName, po::value(&positional));
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description pos;
  pos.add(positionalName, 1);
  try {
    po::store(
        po::command_line_parser(argc, argv).options(all).positional(pos).run(),
        vm);
    po::notify(vm);
  } catch (const po::error &e) {
    std::cerr << tool << ": error: " << e.what() << " (see " << tool
              << " --help)\n";
    return false;
  }
  return true;
}

} // namespace gpipe

#endif
