package v1alpha1

// Name patterns shared by the kinds. Tool and rule names are what a model and
// an operator read in transcripts and traces, so they are short, lowercase
// and DNS-label-like; underscores are allowed because model tool names use
// them ("read_file").
const (
	// NamePattern is the pattern of tool and rule names.
	NamePattern = `^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
)

// ConditionReady is the condition type every toolgate kind with conditions
// reports: True when the object is usable as declared.
const ConditionReady = "Ready"

// AdditionalContext is a message delivered to the model after the turn that
// produced it has committed all of its results.
type AdditionalContext struct {
	// source says who attached the context: the tool body (Tool), a
	// post-execute rule (Policy), or the approvers of a call whose profile
	// relays their messages (Approval).
	// +required
	// +kubebuilder:validation:Enum=Tool;Policy;Approval
	Source string `json:"source"`

	// rule is the post-execute rule that attached the context, when source is
	// Policy; the pre-execute rule that asked, when source is Approval.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Rule string `json:"rule,omitempty"`

	// message is the text given to the model.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	Message string `json:"message"`
}

// Context sources.
const (
	// ContextSourceTool marks a context the tool body deferred.
	ContextSourceTool = "Tool"
	// ContextSourcePolicy marks a context a post-execute rule attached.
	ContextSourcePolicy = "Policy"
	// ContextSourceApproval marks the approvers' messages on an approved
	// call, when its question relayed them.
	ContextSourceApproval = "Approval"
)
