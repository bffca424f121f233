package bench

import (
	"errors"
	"testing"
)

// Steps a failed trajectory never reached are not counted as run: steps_per_s
// used to count every planned step but one per failure (and the failures of
// the earlier phases too).
func TestRunStepsCountsOnlyStepsThatRan(t *testing.T) {
	ran, errs := runSteps(10, 20, func(g, k int) error {
		if g == 3 && k == 5 {
			return errors.New("step failed")
		}
		return nil
	})
	if ran != 10*20-16 || len(errs) != 1 {
		t.Fatalf("ran %d steps with %d failures; want %d and 1", ran, len(errs), 10*20-16)
	}
}
