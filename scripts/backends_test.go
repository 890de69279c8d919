package scripts_test

// The backend the plans of these tests compile for (cmd/gorun registers
// it for gorun).
import _ "gorun/engine/backend/cpu"
