"""trainlab: a Lightning + Hydra template for distributed vision pre-training."""

from trainlab.data.class_count import register as _register_class_count
from trainlab.data.image_files import register as _register_image_files
from trainlab.model.monitor import register as _register_monitor
from trainlab.trainer.cpu_precision import register as _register_cpu_precision
from trainlab.utils.size_rules import register as _register_size_rules

__version__ = "0.1.0"

# Before any config is resolved: ${count_classes:...} and ${folder_*:...} in configs/data,
# ${monitor:...} in train.yaml, ${cpu_precision:...} in configs/experiment/ijepa_mnist.yaml,
# ${patch:...} and ${scaled:...} in configs/experiment/*_folder.yaml.
_register_class_count()
_register_image_files()
_register_monitor()
_register_cpu_precision()
_register_size_rules()
