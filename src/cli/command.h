// Subcommands of the one `tessera` binary. Each Add*Command registers its flags on the app and a
// callback that runs it and stores the process exit status:
//   0 success, 1 a failure at run time, 2 bad input (a flag, a file, a value), 3 (`tessera plan`)
//   the plan asked for does not exist, 4 (`tessera doctor`) the checks found errors.
#pragma once

#include "CLI/CLI.hpp"

namespace tessera::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoPlan = 3;
inline constexpr int kExitProblemsFound = 4;

void AddSimulateCommand(CLI::App& app, int* exit_code);
void AddTopoCommand(CLI::App& app, int* exit_code);
void AddSchedulerCommand(CLI::App& app, int* exit_code);
void AddAgentCommand(CLI::App& app, int* exit_code);
void AddPlanCommand(CLI::App& app, int* exit_code);
void AddStatusCommand(CLI::App& app, int* exit_code);
void AddDoctorCommand(CLI::App& app, int* exit_code);
void AddExplainCommand(CLI::App& app, int* exit_code);

// Runs the app on argv; handles --help and parse errors (exit status 2).
int Run(CLI::App& app, int argc, char** argv, int* exit_code);

}  // namespace tessera::cli
